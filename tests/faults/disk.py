"""A slow disk: each node's data folder on an ext4 file system of its own, on a loop device, and
the node's process in a cgroup v1 blkio group whose write IOPS can be throttled.

```text
  <out>/disks/<prefix>-nK.img (sparse, 512 MiB) ── losetup ── /dev/loopM ── mkfs.ext4
      ── mount on <out>/disks/<prefix>-nK/   (its data/ is the node's --data-dir)
  /sys/fs/cgroup/blkio/<prefix>-nK/   cgroup.procs <- the node's PID (after each start)
      blkio.throttle.write_iops_device = "7:M <iops>" (0 = no limit)
```

A throttle of 4 write IOPS makes each fdatasync about half a second (its data write and the
journal's both wait). cgroup v1 throttles the bios the process submits itself, which is how
O_DIRECT writes and fdatasync go, so the node's command log feels it; buffered writeback (done
by the kernel's flusher threads) would not. Needs cgroup v1's blkio controller mounted at
/sys/fs/cgroup/blkio (this machine has it); elsewhere `available()` says why not.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from .net import run

log = logging.getLogger("faults.disk")

BLKIO = Path("/sys/fs/cgroup/blkio")


def available() -> str | None:
    """None if a slow disk can be made here, else why not."""
    if not (BLKIO / "blkio.throttle.write_iops_device").exists():
        return f"no cgroup v1 blkio controller with throttling at {BLKIO}"
    if run(["losetup", "-f"], check=False).returncode != 0:
        return "no free loop device (losetup -f)"
    if run(["which", "mkfs.ext4"], check=False).returncode != 0:
        return "mkfs.ext4 missing (e2fsprogs)"
    return None


class Disk:
    def __init__(self, name: str, prefix: str, folder: Path, size_mb: int = 512):
        self.name = name
        # Named with the run's prefix, so that --cleanup finds what a killed run left.
        self.image = folder / f"{prefix}-{name}.img"
        self.mount = folder / f"{prefix}-{name}"
        self.cgroup = BLKIO / f"{prefix}-{name}"
        self.size_mb = size_mb
        self.loop: str | None = None
        self.majmin: str | None = None
        self.mounted = False

    def create(self) -> Path:
        self.image.parent.mkdir(parents=True, exist_ok=True)
        with open(self.image, "wb") as f:
            f.truncate(self.size_mb << 20)
        self.loop = run(["losetup", "-f", "--show", str(self.image)]).stdout.strip()
        st = os.stat(self.loop)
        self.majmin = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
        run(["mkfs.ext4", "-q", "-F", self.loop])
        self.mount.mkdir(parents=True, exist_ok=True)
        run(["mount", self.loop, str(self.mount)])
        self.mounted = True
        self.cgroup.mkdir(exist_ok=True)
        log.info("%s: %s (%s) on %s", self.name, self.loop, self.majmin, self.mount)
        return self.mount

    def adopt(self, pid: int) -> None:
        """Puts the process (all its threads) in this disk's cgroup."""
        (self.cgroup / "cgroup.procs").write_text(f"{pid}\n")

    def throttle(self, write_iops: int) -> None:
        """Write IOPS limit on this disk for the cgroup's processes; 0 lifts it."""
        (self.cgroup / "blkio.throttle.write_iops_device").write_text(
            f"{self.majmin} {write_iops}\n"
        )
        log.info("%s: write IOPS %s", self.name, write_iops or "unlimited")

    def destroy(self) -> None:
        if self.cgroup.exists():
            try:
                self.throttle(0)
            except OSError:
                pass
            # Processes still in it (should be none) go back to the root group first.
            try:
                for pid in (self.cgroup / "cgroup.procs").read_text().split():
                    try:
                        (BLKIO / "cgroup.procs").write_text(pid + "\n")
                    except OSError:
                        pass
                self.cgroup.rmdir()
            except OSError as e:
                log.warning("%s: cgroup %s: %s", self.name, self.cgroup, e)
        if self.mounted:
            if run(["umount", str(self.mount)], check=False).returncode != 0:
                run(["umount", "-l", str(self.mount)], check=False)
            self.mounted = False
            try:
                self.mount.rmdir()
            except OSError:
                pass
        if self.loop:
            run(["losetup", "-d", self.loop], check=False)
            self.loop = None
        try:
            self.image.unlink()
        except OSError:
            pass


def leftovers(pattern: str) -> list[tuple[str, str, list[str]]]:
    """(loop device, image, mount points) of images whose file name matches `pattern` (a
    regular expression): disks a killed run left behind."""
    import re

    out = []
    p = run(["losetup", "-l", "-n", "-O", "NAME,BACK-FILE"], check=False)
    mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    for line in p.stdout.splitlines():
        words = line.split(None, 1)
        if len(words) == 2 and re.match(pattern, Path(words[1].strip()).name):
            dev = words[0]
            out.append((dev, words[1].strip(), [m[1] for m in mounts if m and m[0] == dev]))
    return out
