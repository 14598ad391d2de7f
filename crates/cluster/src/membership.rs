//! Membership: an ephemeral znode in ARCUS's layout for as long as this node serves.
//!
//! ```text
//!   join (after recovery, before the ready line; a failure refuses the start)
//!     connect (session timeout T) ─> mapping: <root>/cache_server_mapping/<ip:port>/<svc>
//!       (created when missing, as an ARCUS admin would provision it; another service
//!       there refuses the start)
//!     ─> mkdir <root>/client_list/<svc> (ARCUS's clients list themselves there: the Java
//!        client's start fails without it)
//!     ─> mkdir <root>/cache_list/<svc> ─> create EPHEMERAL <root>/cache_list/<svc>/<name>
//!        (<name> = <ip:port>-<hostname>, data "<-m>MB"; a znode of that name left by an
//!        earlier run of this node, whose session has not timed out yet, is replaced)
//!   keep (a task): Disconnected ─> the client reconnects by itself within T (same session,
//!     the znode stays); Expired / Closed / AuthFailed ─> connect anew and register again,
//!     backing off 100 ms doubling to 5 s, until it works or the node stops
//!   leave (graceful shutdown, before connections are drained): delete the znode, close
//!     the session
//! ```
//!
//! A kill -9 leaves the znode to ZooKeeper: it goes when the session times out (T after the
//! last heartbeat). ARCUS's own server exits when its session expires, so that it restarts
//! cold; cairn's data is durable and was never stale, so it registers again instead.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use zookeeper_client as zk;

use crate::error::ClusterError;

/// How long the first registration keeps trying to reach ZooKeeper at least.
const JOIN_PATIENCE: Duration = Duration::from_secs(10);

/// What a node registers, and where.
#[derive(Clone, Debug)]
pub struct MembershipConfig {
    /// ZooKeeper's connect string: `host:port[,host:port...][/chroot]`.
    pub ensemble: String,
    /// ARCUS's root: `/arcus` for a plain cache node.
    pub root: String,
    /// The service (ARCUS's "service code"): clients of a service hash over its nodes.
    pub service_code: String,
    /// The address clients reach this node at (the znode's `ip:port`).
    pub advertise: SocketAddr,
    /// This machine's name (the znode name's last part: only there to help people).
    pub hostname: String,
    /// `-m`, written as the znode's data (`"<N>MB"`, as ARCUS does).
    pub memory_limit_mb: u64,
    /// ZooKeeper's session timeout: how long after a kill -9 the znode stays.
    pub session_timeout: Duration,
}

impl MembershipConfig {
    /// Checks the names that go into znode paths.
    pub fn validate(&self) -> Result<(), ClusterError> {
        let svc = &self.service_code;
        if svc.is_empty() || svc.contains(['/', '^']) || svc == "." || svc == ".." {
            return Err(ClusterError::Invalid(format!(
                "service code {svc:?}: it names a znode (not empty, no '/' or '^')"
            )));
        }
        if !self.root.starts_with('/') || self.root.ends_with('/') {
            return Err(ClusterError::Invalid(format!(
                "ZooKeeper root {:?} must start with '/' and not end with one",
                self.root
            )));
        }
        Ok(())
    }

    /// `<ip:port>-<hostname>`, ARCUS's node name.
    pub fn node_name(&self) -> String {
        format!("{}-{}", self.advertise, self.hostname)
    }

    /// `<root>/cache_list/<svc>`: the live nodes of the service.
    pub fn cache_list(&self) -> String {
        format!("{}/cache_list/{}", self.root, self.service_code)
    }

    /// `<root>/client_list/<svc>`: where ARCUS's clients of the service create an ephemeral
    /// znode each (arcus-java-client's `CacheManager.initZooKeeperClient` creates
    /// `<root>/client_list/<svc>/<host>_<ip>_<pool>_java_<version>_<time>_<session>` and
    /// fails to start with NoNode when the folder is missing). An ARCUS admin provisions it
    /// with the service; a node creates it when missing, as it does its mapping.
    pub fn client_list(&self) -> String {
        format!("{}/client_list/{}", self.root, self.service_code)
    }

    /// `<root>/cache_list/<svc>/<ip:port>-<hostname>`: this node's ephemeral znode.
    pub fn znode_path(&self) -> String {
        format!("{}/{}", self.cache_list(), self.node_name())
    }

    /// `<root>/cache_server_mapping/<ip:port>`: its child names this node's service.
    pub fn mapping_path(&self) -> String {
        format!("{}/cache_server_mapping/{}", self.root, self.advertise)
    }
}

/// What `stats` shows about the membership (updated by the keeping task).
#[derive(Debug, Default)]
pub struct MembershipStatus {
    /// Whether the znode is there as far as this node knows.
    pub registered: AtomicBool,
    /// Whether the session is connected to a ZooKeeper server now.
    pub connected: AtomicBool,
    /// Sessions opened so far (1 after the start; each expiry adds one).
    pub sessions: AtomicU64,
    /// The current session's id (0 while there is none).
    pub session_id: AtomicI64,
}

/// A registered node: its znode lives until [`Membership::leave`] or the process dies.
pub struct Membership {
    config: Arc<MembershipConfig>,
    status: Arc<MembershipStatus>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Membership {
    /// Connects and registers: the node is listed once this returns Ok. An error (ZooKeeper
    /// unreachable for the session timeout and at least 10 s, a mapping to another service)
    /// should refuse the start.
    pub async fn join(config: MembershipConfig) -> Result<Membership, ClusterError> {
        config.validate()?;
        let config = Arc::new(config);
        let status = Arc::new(MembershipStatus::default());
        // A busy machine or a ZooKeeper just started (its first requests are slow) may miss
        // a short session timeout: keep trying for 10 s at least.
        let deadline = tokio::time::Instant::now() + config.session_timeout.max(JOIN_PATIENCE);
        let client = loop {
            match connect(&config, &status).await {
                Ok(c) => break c,
                Err(e) if tokio::time::Instant::now() < deadline => {
                    tracing::warn!("{e}; trying again");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e),
            }
        };
        register(&client, &config).await?;
        status.registered.store(true, Ordering::SeqCst);
        tracing::info!(
            znode = %config.znode_path(),
            session = %client.session_id(),
            "registered in ZooKeeper"
        );
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(keep(
            client,
            Arc::clone(&config),
            Arc::clone(&status),
            stopped,
        ));
        Ok(Membership {
            config,
            status,
            stop,
            task,
        })
    }

    /// The figures `stats` shows.
    pub fn status(&self) -> &Arc<MembershipStatus> {
        &self.status
    }

    /// What was registered.
    pub fn config(&self) -> &MembershipConfig {
        &self.config
    }

    /// Removes the znode and closes the session (graceful shutdown). Bounded by the session
    /// timeout when ZooKeeper does not answer; the session's end removes the znode anyway.
    pub async fn leave(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Opens a session (retrying the ensemble's servers for up to the session timeout).
async fn connect(
    config: &MembershipConfig,
    status: &MembershipStatus,
) -> Result<zk::Client, ClusterError> {
    let client = zk::Client::connector()
        .with_session_timeout(config.session_timeout)
        .connect(&config.ensemble)
        .await
        .map_err(ClusterError::zk(format!("connect to {}", config.ensemble)))?;
    status.sessions.fetch_add(1, Ordering::Relaxed);
    status
        .session_id
        .store(client.session_id().0, Ordering::Relaxed);
    status.connected.store(true, Ordering::Relaxed);
    Ok(client)
}

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

/// Makes sure of the mapping and the service's folder, then creates this node's znode.
async fn register(client: &zk::Client, config: &MembershipConfig) -> Result<(), ClusterError> {
    let mapping = config.mapping_path();
    client
        .mkdir(&mapping, &persistent())
        .await
        .map_err(ClusterError::zk(format!("create {mapping}")))?;
    let services = client
        .list_children(&mapping)
        .await
        .map_err(ClusterError::zk(format!("list {mapping}")))?;
    match services.first() {
        None => {
            let entry = format!("{mapping}/{}", config.service_code);
            match client.create(&entry, &[], &persistent()).await {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(e) => return Err(ClusterError::zk(format!("create {entry}"))(e)),
            }
        }
        Some(_) if services.contains(&config.service_code) => {}
        Some(other) => {
            return Err(ClusterError::MappedElsewhere {
                path: mapping,
                found: other.clone(),
                wanted: config.service_code.clone(),
            })
        }
    }
    for dir in [config.client_list(), config.cache_list()] {
        client
            .mkdir(&dir, &persistent())
            .await
            .map_err(ClusterError::zk(format!("create {dir}")))?;
    }
    let path = config.znode_path();
    let data = format!("{}MB", config.memory_limit_mb);
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    // A znode of this name belongs to a session of an earlier run of this node (it holds the
    // address's port now): replace it rather than wait up to a session timeout for it to go.
    for _ in 0..3 {
        match client.create(&path, data.as_bytes(), &ephemeral).await {
            Ok(_) => return Ok(()),
            Err(zk::Error::NodeExists) => {}
            Err(e) => return Err(ClusterError::zk(format!("create {path}"))(e)),
        }
        match client.check_stat(&path).await {
            Ok(Some(stat)) if stat.ephemeral_owner == client.session_id().0 => return Ok(()),
            Ok(Some(stat)) => {
                tracing::warn!(
                    znode = %path,
                    owner = stat.ephemeral_owner,
                    "replacing the znode an earlier run of this node left"
                );
                match client.delete(&path, Some(stat.version)).await {
                    Ok(()) | Err(zk::Error::NoNode) | Err(zk::Error::BadVersion) => {}
                    Err(e) => return Err(ClusterError::zk(format!("delete {path}"))(e)),
                }
            }
            Ok(None) => {}
            Err(e) => return Err(ClusterError::zk(format!("stat {path}"))(e)),
        }
    }
    Err(ClusterError::Invalid(format!(
        "{path} keeps coming back: another process registers the same address"
    )))
}

/// Follows the session's state until `stop`; registers again with a new session whenever the
/// old one ended; removes the znode on the way out.
async fn keep(
    mut client: zk::Client,
    config: Arc<MembershipConfig>,
    status: Arc<MembershipStatus>,
    mut stop: watch::Receiver<bool>,
) {
    let mut states = client.state_watcher();
    loop {
        let state = tokio::select! {
            s = states.changed() => s,
            _ = stop.changed() => break,
        };
        match state {
            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                tracing::info!("ZooKeeper connection back (same session)");
                status.connected.store(true, Ordering::Relaxed);
            }
            zk::SessionState::Disconnected => {
                tracing::warn!("ZooKeeper connection lost; reconnecting within the session");
                status.connected.store(false, Ordering::Relaxed);
            }
            ended => {
                tracing::warn!("ZooKeeper session ended ({ended:?}); registering again");
                status.registered.store(false, Ordering::SeqCst);
                status.connected.store(false, Ordering::Relaxed);
                status.session_id.store(0, Ordering::Relaxed);
                match rejoin(&config, &status, &mut stop).await {
                    Some(c) => {
                        client = c;
                        states = client.state_watcher();
                    }
                    None => return,
                }
            }
        }
    }
    let path = config.znode_path();
    match tokio::time::timeout(config.session_timeout, client.delete(&path, None)).await {
        Ok(Ok(())) | Ok(Err(zk::Error::NoNode)) => tracing::info!(znode = %path, "left"),
        Ok(Err(e)) => tracing::warn!(znode = %path, "cannot remove the znode: {e}"),
        Err(_) => tracing::warn!(znode = %path, "ZooKeeper did not answer the removal"),
    }
    status.registered.store(false, Ordering::SeqCst);
    // Dropping the last client closes the session.
}

/// Connects and registers until it works (Some) or `stop` turns true (None).
async fn rejoin(
    config: &MembershipConfig,
    status: &MembershipStatus,
    stop: &mut watch::Receiver<bool>,
) -> Option<zk::Client> {
    let mut backoff = Duration::from_millis(100);
    loop {
        let attempt = async {
            let client = connect(config, status).await?;
            register(&client, config).await?;
            Ok::<_, ClusterError>(client)
        };
        let result = tokio::select! {
            r = attempt => r,
            _ = stop.changed() => return None,
        };
        match result {
            Ok(client) => {
                status.registered.store(true, Ordering::SeqCst);
                tracing::info!(
                    znode = %config.znode_path(),
                    session = %client.session_id(),
                    "registered in ZooKeeper again"
                );
                return Some(client);
            }
            Err(e) => tracing::warn!("registering again failed, retrying in {backoff:?}: {e}"),
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => return None,
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// The address clients should use for a server bound to `bound`: its own IP unless it listens
/// on every address, then the local address a datagram towards the first ZooKeeper server
/// would leave from (ARCUS finds its IP the same way).
pub fn advertised_address(bound: SocketAddr, ensemble: &str) -> SocketAddr {
    if !bound.ip().is_unspecified() {
        return bound;
    }
    let first = ensemble
        .split('/')
        .next()
        .unwrap_or("")
        .split(',')
        .next()
        .unwrap_or("");
    let ip = first
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .and_then(|zk| {
            let socket = UdpSocket::bind((IpAddr::from([0, 0, 0, 0]), 0)).ok()?;
            socket.connect(zk).ok()?;
            socket.local_addr().ok().map(|a| a.ip())
        })
        .unwrap_or(IpAddr::from([127, 0, 0, 1]));
    SocketAddr::new(ip, bound.port())
}

/// This machine's host name (Linux), or "localhost".
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(svc: &str) -> MembershipConfig {
        MembershipConfig {
            ensemble: "127.0.0.1:2181".into(),
            root: "/arcus".into(),
            service_code: svc.into(),
            advertise: "10.0.0.1:11211".parse().unwrap(),
            hostname: "cache-1".into(),
            memory_limit_mb: 64,
            session_timeout: Duration::from_secs(30),
        }
    }

    #[test]
    fn arcus_paths() {
        let c = config("test");
        assert_eq!(
            c.znode_path(),
            "/arcus/cache_list/test/10.0.0.1:11211-cache-1"
        );
        assert_eq!(
            c.mapping_path(),
            "/arcus/cache_server_mapping/10.0.0.1:11211"
        );
        assert_eq!(c.client_list(), "/arcus/client_list/test");
    }

    #[test]
    fn service_codes_that_cannot_name_a_znode_are_refused() {
        for bad in ["", "a/b", "a^b", ".."] {
            assert!(config(bad).validate().is_err(), "{bad:?}");
        }
        assert!(config("svc-1").validate().is_ok());
    }

    #[test]
    fn a_specific_listen_address_is_advertised_as_is() {
        let bound: SocketAddr = "127.0.0.3:4000".parse().unwrap();
        assert_eq!(advertised_address(bound, "127.0.0.1:2181"), bound);
        let any: SocketAddr = "0.0.0.0:4000".parse().unwrap();
        assert_eq!(
            advertised_address(any, "127.0.0.1:2181"),
            "127.0.0.1:4000".parse::<SocketAddr>().unwrap()
        );
    }
}
