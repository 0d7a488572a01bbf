//! `ken serve` as clients start it: attaches stdio to the repository's shared
//! service (see [`super::service`]), starting the service when none answers,
//! then copies bytes both ways until either side closes. stdout carries only
//! what the service sends after its welcome: JSON-RPC.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::rendezvous::{lock, lock_file, try_lock, Rendezvous};
use super::service::{Hello, Welcome};
use super::ServeOptions;

/// How long a new service may take to listen, or a closing one to exit.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a service may take to welcome a client (it answers at once).
const WELCOME_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves stdio through the shared service of `root`, starting it if needed.
pub fn attach(root: &Path, index_dir: &Path, opts: &ServeOptions) -> Result<()> {
    // A bad tool list is this client's error, said before anything starts.
    super::selected_tools(&opts.tools)?;
    let workspace = opts.workspace.as_ref().map(|w| w.file.as_path());
    let rendezvous = Rendezvous::for_index(root, index_dir, opts.watch.is_some(), workspace)?;
    let hello = Hello {
        tools: opts.tools.clone(),
        allow_kb: opts
            .allowed_kb_folders
            .iter()
            .filter_map(|f| f.canonicalize().ok())
            .collect(),
        probe: false,
    };
    let deadline = Instant::now() + START_TIMEOUT;
    let (stream, from_service, welcome) = loop {
        if let Some(session) = open_session(&rendezvous, &hello)? {
            break session;
        }
        if Instant::now() > deadline {
            bail!(
                "the ken service does not accept sessions; see {} (or run `ken serve --no-service`)",
                rendezvous.log().display()
            );
        }
        if !start_service(&rendezvous, root, index_dir, opts.watch.is_some(), workspace)? {
            // A service is closing (it welcomes no one): it holds its life lock until it has exited.
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    tracing::info!("attached to the ken service (pid {})", welcome.pid);
    pump(stream, from_service)
}

/// Who serves this repository with this process's settings (pid, sessions), if a service runs.
pub fn probe(root: &Path, index_dir: &Path, watch: bool) -> Option<Welcome> {
    let rendezvous = Rendezvous::for_index(root, index_dir, watch, None).ok()?;
    let hello = Hello {
        probe: true,
        ..Hello::default()
    };
    open_session(&rendezvous, &hello).ok().flatten().map(|(_, _, w)| w)
}

type Opened = (UnixStream, BufReader<UnixStream>, Welcome);

/// A session with the running service; `None` when none answers (no
/// socket, a stale one, or a service closing).
fn open_session(rendezvous: &Rendezvous, hello: &Hello) -> Result<Option<Opened>> {
    let Ok(mut stream) = UnixStream::connect(rendezvous.socket()) else {
        return Ok(None);
    };
    let line = serde_json::to_string(hello)? + "\n";
    if stream.write_all(line.as_bytes()).is_err() {
        return Ok(None);
    }
    stream.set_read_timeout(Some(WELCOME_TIMEOUT))?;
    let mut from_service = BufReader::new(stream.try_clone()?);
    let mut answer = String::new();
    if from_service.read_line(&mut answer).unwrap_or(0) == 0 {
        return Ok(None);
    }
    let welcome: Welcome = serde_json::from_str(&answer).context("the ken service answered nonsense")?;
    if let Some(why) = welcome.error {
        bail!("the ken service refused the session: {why}");
    }
    stream.set_read_timeout(None)?;
    Ok(Some((stream, from_service, welcome)))
}

/// Starts the service unless one runs (answering, starting or closing);
/// whether it started one. One start at a time.
fn start_service(
    rendezvous: &Rendezvous,
    root: &Path,
    index_dir: &Path,
    watch: bool,
    workspace: Option<&Path>,
) -> Result<bool> {
    let start = lock_file(&rendezvous.start_lock())?;
    lock(&start).context("waiting for another ken serve to start the service")?;
    let life = lock_file(&rendezvous.life_lock())?;
    if !try_lock(&life) {
        return Ok(false);
    }
    drop(life);
    let deadline = Instant::now() + START_TIMEOUT;
    let _ = std::fs::remove_file(rendezvous.socket());
    let log = {
        use std::os::unix::fs::OpenOptionsExt;
        let path = rendezvous.log();
        let opened = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&path);
        opened.with_context(|| format!("cannot write {}", path.display()))?
    };
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg("--root")
        .arg(root)
        .arg("--index-dir")
        .arg(index_dir)
        .args(["serve", "--service", rendezvous.key()]);
    if !watch {
        cmd.arg("--no-watch");
    }
    if let Some(file) = workspace {
        // Explicit, so it wins over --root: the service serves the same member.
        cmd.arg("--workspace").arg(file);
    }
    // Its own process group: a client's Ctrl-C or hang-up is not the service's.
    let mut child = cmd
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("cannot start the ken service")?;
    tracing::info!("started the ken service (pid {})", child.id());
    while !rendezvous.socket().exists() {
        if let Some(status) = child.try_wait()? {
            let said = std::fs::read_to_string(rendezvous.log()).unwrap_or_default();
            bail!("the ken service exited ({status}): {}", said.trim());
        }
        if Instant::now() > deadline {
            bail!("the ken service did not listen within {} s", START_TIMEOUT.as_secs());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(true)
}

/// Copies stdin to the service and the service to stdout until the service
/// closes; an error when it closed before the client did (it died).
fn pump(stream: UnixStream, mut from_service: BufReader<UnixStream>) -> Result<()> {
    let client_closed = Arc::new(AtomicBool::new(false));
    let mut to_service = stream;
    let closed = client_closed.clone();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut to_service);
        closed.store(true, Ordering::SeqCst);
        let _ = to_service.shutdown(std::net::Shutdown::Write);
    });
    let mut stdout = std::io::stdout().lock();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = match from_service.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if stdout.write_all(&buffer[..n]).and_then(|()| stdout.flush()).is_err() {
            // The client is gone: so is its session.
            return Ok(());
        }
    }
    if !client_closed.load(Ordering::SeqCst) {
        bail!("the ken service ended the session (it stopped or crashed); the next `ken serve` starts a new one");
    }
    Ok(())
}
