//! toolshelf-runtime: the async and file-system pieces the gateway and the proxy share.
//!
//! The core decides (what a hook's answer means, what a search index holds); this crate only
//! does: running hook processes ([`hooks`]), keeping files ([`files`]) and the audit log
//! ([`audit`]), the seam for extra search rankers ([`enrich`]), the Prometheus exposition of the
//! figures both edges record ([`metrics`]), a log line for a repeated event said sparingly
//! ([`throttle`]), and script tools: the environment they run in ([`script`]) and the processes
//! that run them ([`scripts`]). It knows nothing of MCP or of any LLM API, so both edges depend
//! on it and not on each other.

pub mod audit;
pub mod enrich;
pub mod files;
pub mod hooks;
pub mod metrics;
pub mod script;
pub mod scripts;
pub mod throttle;

/// Kills every process left in process group `pgid` (SIGKILL; unix only, a no-op elsewhere): the
/// group a hook or a server was started in, so that what it started goes with it. A group whose
/// processes have all exited already is nothing to kill.
pub fn kill_process_group(pgid: u32) {
    #[cfg(unix)]
    if let Ok(id) = i32::try_from(pgid) {
        use nix::sys::signal::{Signal, killpg};
        let _ = killpg(nix::unistd::Pid::from_raw(id), Signal::SIGKILL);
    }
    #[cfg(not(unix))]
    let _ = pgid;
}

/// Runs `work` on the blocking pool and waits for it. For CPU work whose cost the caller does
/// not bound (checking params against a schema the model wrote, compiling such a schema): on a
/// runtime worker it would hold that worker, and every request waiting on it. A panic in `work`
/// goes on here, as if it had run inline.
pub async fn off_workers<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(work).await {
        Ok(done) => done,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(e) => panic!("work on the blocking pool did not run: {e}"),
        },
    }
}

/// An error with the errors that caused it, as `a: b: c`, each said once. HTTP clients say what
/// failed at the top (`error sending request for url (...)`) and why (`Connection refused`)
/// only at the bottom of the chain.
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut next = error.source();
    while let Some(e) = next {
        let text = e.to_string();
        if !out.contains(&text) {
            out = format!("{out}: {text}");
        }
        next = e.source();
    }
    out
}
