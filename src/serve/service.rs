//! The shared service: one process per repository (and behaviour settings)
//! owning the watcher, the background embedding, the searchers and the
//! metrics, serving every `ken serve` of that repository as its own MCP
//! session over a Unix socket, and exiting once idle.
//!
//! A connection starts with one line each way: the client's [`Hello`] (its
//! tool selection and allowed knowledge-base folders, which stay per
//! session), the service's [`Welcome`]; then MCP, checked line by line as
//! on stdio. A service that has decided to exit sends no welcome, so a
//! client that connected in that moment starts the next service instead.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rmcp::ServiceExt;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use super::rendezvous::{lock_file, try_lock, Rendezvous};
use super::{jobs, runtime, stdio, KenServer, ServeOptions};

/// How long a client has to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the service checks whether it should exit.
const TICK: Duration = Duration::from_millis(250);
/// How long a new service waits for the client that started it, whatever its idle time.
const FIRST_SESSION_GRACE: Duration = Duration::from_secs(10);

/// A client's first line: what of its session is its own.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Hello {
    pub tools: Vec<String>,
    pub allow_kb: Vec<PathBuf>,
    /// Only asking who serves (`ken status`): no MCP session follows.
    #[serde(default)]
    pub probe: bool,
}

/// The service's first line: who serves, or why it will not.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Welcome {
    pub pid: u32,
    pub sessions: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The service a server belongs to, for `index_status`.
#[derive(Debug, Default)]
pub struct ServiceInfo {
    pub pid: u32,
    /// Connections open (sessions, and clients saying hello).
    pub sessions: AtomicUsize,
}

/// When the service last had work, and whether it is closing.
struct Lifecycle {
    idle_since: Instant,
    closing: bool,
    /// A client has connected since the start.
    served: bool,
}

/// Runs the service of `rendezvous` until it has been idle for `idle` (or its
/// root disappears, or another service took its socket).
pub fn run(
    root: PathBuf,
    index_dir: PathBuf,
    opts: ServeOptions,
    rendezvous: Rendezvous,
    idle: Duration,
) -> Result<()> {
    let life = lock_file(&rendezvous.life_lock())?;
    if !try_lock(&life) {
        bail!("another ken service for this repository runs ({})", rendezvous.key());
    }
    let log = super::log_path(&index_dir);
    if let Err(e) = super::logs::write_to_file(&log) {
        tracing::warn!("cannot write the log file {}: {e}", log.display());
    }
    let socket = rendezvous.socket();
    // Under the life lock no other service of this key runs: a socket left is stale.
    let _ = std::fs::remove_file(&socket);
    let listener = bind_owner_only(&socket)?;
    let socket_id = inode(&socket);
    tracing::info!(
        "service {} for {} (index {}, pid {})",
        rendezvous.key(),
        root.display(),
        index_dir.display(),
        std::process::id()
    );
    // Before the watcher starts: its first update may create the index at once.
    let first_index = !crate::store::has_index(&index_dir);
    let watcher = opts
        .watch
        .and_then(|watch| jobs::start_watcher(&root, &index_dir, watch));
    let mut base = KenServer::new(root, index_dir, super::selected_tools(&[])?, Vec::new());
    base.first_index = first_index;
    base.members = opts.workspace.map(Arc::new);
    base.watch = watcher.as_ref().map(|w| w.state());
    base.service = Some(Arc::new(ServiceInfo {
        pid: std::process::id(),
        sessions: AtomicUsize::new(0),
    }));
    base.load_model_in_background();
    let runtime = runtime()?;
    runtime.block_on(async {
        listener.set_nonblocking(true)?;
        let listener = tokio::net::UnixListener::from_std(listener)?;
        accept_sessions(&base, listener, idle, &socket, socket_id).await;
        anyhow::Ok(())
    })?;
    if inode(&socket) == socket_id {
        let _ = std::fs::remove_file(&socket);
    }
    tracing::info!("service {}: stopping", rendezvous.key());
    runtime.shutdown_timeout(Duration::from_secs(2));
    drop(watcher);
    drop(life);
    Ok(())
}

/// Binds the socket readable and writable by its owner only.
fn bind_owner_only(socket: &Path) -> Result<std::os::unix::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let listener = std::os::unix::net::UnixListener::bind(socket)
        .with_context(|| format!("cannot listen on {}", socket.display()))?;
    // The folder is the user's alone already; the socket says so too.
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

fn inode(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).ok().map(|m| m.ino())
}

/// Accepts connections until the service should stop.
async fn accept_sessions(
    base: &KenServer,
    listener: tokio::net::UnixListener,
    idle: Duration,
    socket: &Path,
    socket_id: Option<u64>,
) {
    let info = base.service.clone().unwrap_or_default();
    let life = Arc::new(Mutex::new(Lifecycle {
        idle_since: Instant::now(),
        closing: false,
        served: false,
    }));
    let mut tick = tokio::time::interval(TICK);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    info.sessions.fetch_add(1, Ordering::SeqCst);
                    life.lock().unwrap_or_else(|e| e.into_inner()).served = true;
                    let session = Session { server: base.clone(), info: info.clone(), life: life.clone() };
                    tokio::spawn(session.serve(stream));
                }
                Err(e) => tracing::warn!("service: accepting a connection: {e}"),
            },
            _ = tick.tick() => {
                let mut life = life.lock().unwrap_or_else(|e| e.into_inner());
                let idle = if life.served { idle } else { idle.max(FIRST_SESSION_GRACE) };
                let why = if !base.root.exists() {
                    Some("its root is gone".to_string())
                } else if inode(socket) != socket_id {
                    Some("its socket was replaced".to_string())
                } else if info.sessions.load(Ordering::SeqCst) == 0
                    && !base.jobs.index_running()
                    && life.idle_since.elapsed() >= idle
                {
                    Some(format!("no session for {:.0} s", life.idle_since.elapsed().as_secs_f64()))
                } else {
                    None
                };
                if let Some(why) = why {
                    life.closing = true;
                    tracing::info!("service: exiting: {why}");
                    return;
                }
            }
        }
    }
}

/// One connection, from hello to close.
struct Session {
    server: KenServer,
    info: Arc<ServiceInfo>,
    life: Arc<Mutex<Lifecycle>>,
}

impl Drop for Session {
    fn drop(&mut self) {
        let mut life = self.life.lock().unwrap_or_else(|e| e.into_inner());
        self.info.sessions.fetch_sub(1, Ordering::SeqCst);
        life.idle_since = Instant::now();
    }
}

impl Session {
    async fn serve(self, stream: UnixStream) {
        let (read, mut write) = stream.into_split();
        let mut reader = BufReader::new(read);
        let mut line = String::new();
        let hello = match tokio::time::timeout(HELLO_TIMEOUT, reader.read_line(&mut line)).await {
            Ok(Ok(n)) if n > 0 => serde_json::from_str::<Hello>(&line).context("not a ken hello"),
            _ => return,
        };
        let session = hello.and_then(|hello| Ok((hello.probe, self.session_server(hello)?)));
        let mut welcome = Welcome {
            pid: self.info.pid,
            sessions: self.info.sessions.load(Ordering::SeqCst),
            error: None,
        };
        let (probe, server) = match session {
            Ok((probe, server)) => {
                // A probe asks how many sessions there are, itself aside.
                welcome.sessions -= usize::from(probe);
                (probe, server)
            }
            Err(e) => {
                welcome.error = Some(format!("{e:#}"));
                let _ = write.write_all(welcome_line(&welcome).as_bytes()).await;
                return;
            }
        };
        if self.life.lock().unwrap_or_else(|e| e.into_inner()).closing {
            return;
        }
        if write.write_all(welcome_line(&welcome).as_bytes()).await.is_err() || probe {
            return;
        }
        tracing::info!("service: session opened ({} open)", welcome.sessions);
        let front = stdio::checked(reader, write);
        match server.serve((front.reader, front.writer)).await {
            Ok(running) => {
                let _ = running.waiting().await;
                let _ = tokio::time::timeout(Duration::from_secs(2), front.stdout_done).await;
            }
            Err(e) => tracing::warn!("service: starting a session: {e}"),
        }
        tracing::info!("service: session closed");
    }

    /// The shared server with this session's own tools and allowed folders.
    fn session_server(&self, hello: Hello) -> Result<KenServer> {
        let mut server = self.server.clone();
        server.tools = Arc::new(super::session_tools(&hello.tools, server.members.is_some())?);
        server.allowed_kb_folders = Arc::new(hello.allow_kb.iter().filter_map(|f| f.canonicalize().ok()).collect());
        Ok(server)
    }
}

fn welcome_line(welcome: &Welcome) -> String {
    serde_json::to_string(welcome).unwrap_or_default() + "\n"
}
