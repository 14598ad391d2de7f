//! memcached's `-u USER`: a server started as root takes on that user's identity (its uid, its
//! primary group and its supplementary groups) before it opens a port or a file, as memcached
//! does. Started as any other user, `-u` changes nothing (memcached ignores it too).

use std::ffi::{CStr, CString};

/// What [`switch_to`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Switched {
    /// The process was root and now runs as the user (uid, gid).
    To { uid: u32, gid: u32 },
    /// The process was not root: `-u` is ignored.
    NotRoot,
}

/// Runs the rest of the process as `user` if it is root now. Call it before any other thread
/// starts (the runtime): the ids change for the calling thread's process. An unknown user, or
/// a refused change, is an error that names the user.
pub fn switch_to(user: &str) -> Result<Switched, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(Switched::NotRoot);
    }
    let name = CString::new(user).map_err(|_| format!("-u {user:?}: not a user name"))?;
    let (uid, gid) = lookup(&name).ok_or_else(|| format!("-u {user}: no such user"))?;
    let fail = |what: &str| format!("-u {user}: {what}: {}", std::io::Error::last_os_error());
    // Groups first: once the uid is not root, they can no longer change.
    // SAFETY: `name` is a valid C string; initgroups reads the group database.
    if unsafe { libc::initgroups(name.as_ptr(), gid as _) } != 0 {
        return Err(fail("initgroups"));
    }
    // SAFETY: plain system calls on ids.
    if unsafe { libc::setgid(gid) } != 0 {
        return Err(fail("setgid"));
    }
    // SAFETY: as above.
    if unsafe { libc::setuid(uid) } != 0 {
        return Err(fail("setuid"));
    }
    Ok(Switched::To { uid, gid })
}

/// The uid and primary gid of user `name`, from the password database.
fn lookup(name: &CStr) -> Option<(u32, u32)> {
    let mut buf = vec![0 as libc::c_char; 16 << 10];
    // SAFETY: an all-zero passwd is a valid value to be filled in.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; buf's length is passed with it.
    let rc = unsafe {
        libc::getpwnam_r(
            name.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    (rc == 0 && !found.is_null()).then_some((pwd.pw_uid, pwd.pw_gid))
}
