//! Prometheus metrics: the one recorder of a process and its text exposition.
//!
//! The edges record through the `metrics` facade (`counter!`, `histogram!`, `gauge!`), which does
//! nothing until a recorder is installed. A serving process (`toolshelf proxy`,
//! `toolshelf serve --http`) installs this one with [`install`] at start; its `GET /metrics`
//! answers with [`render`]. There is one recorder per process, so libraries and their tests never
//! install it: a test of what an edge records runs under a local recorder ([`recorder`] with
//! `metrics::with_local_recorder`).
//!
//! Histograms are rendered as Prometheus histograms with the buckets of [`buckets_for`]. Names
//! are given whole (counters end in `_total`, durations in `_seconds`), and each edge describes its
//! metrics (the `# HELP` lines) in its own `metrics` module.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

/// The installed recorder's handle.
static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// How often histogram samples are folded into their buckets when nobody scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The content type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Buckets of a histogram, by the end of its name: durations in seconds (tool searches take
/// microseconds to milliseconds), and counts per request.
pub fn buckets_for(suffix: &str) -> &'static [f64] {
    match suffix {
        "_seconds" => &[
            0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
        ],
        _ => &[0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0],
    }
}

fn builder() -> PrometheusBuilder {
    ["_seconds", "_rounds"]
        .into_iter()
        .fold(PrometheusBuilder::new(), |b, suffix| {
            b.set_buckets_for_metric(Matcher::Suffix(suffix.into()), buckets_for(suffix))
                .expect("bucket lists are not empty")
        })
}

/// A recorder like the installed one, not installed: for tests, under
/// `metrics::with_local_recorder`, rendered with its `handle()`.
pub fn recorder() -> PrometheusRecorder {
    builder().build_recorder()
}

/// Installs the process's recorder (once; later calls change nothing) and starts its upkeep.
pub fn install() -> Result<(), String> {
    if HANDLE.get().is_some() {
        return Ok(());
    }
    let handle = builder()
        .install_recorder()
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
    let upkeep = handle.clone();
    std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || {
            loop {
                std::thread::sleep(UPKEEP_EVERY);
                upkeep.run_upkeep();
            }
        })
        .map_err(|e| format!("cannot start the metrics upkeep: {e}"))?;
    let _ = HANDLE.set(handle);
    Ok(())
}

/// The gauge both edges write: 1, labelled with the version of the binary.
pub const BUILD_INFO: &str = "toolshelf_build_info";

/// Describes and sets [`BUILD_INFO`].
pub fn build_info() {
    metrics::describe_gauge!(
        BUILD_INFO,
        "Always 1, labelled with the version of the toolshelf binary."
    );
    metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
}

/// The metrics in the Prometheus text format; `None` when no recorder was installed.
pub fn render() -> Option<String> {
    HANDLE.get().map(PrometheusHandle::render)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_get_buckets_by_the_end_of_their_name() {
        let r = recorder();
        let handle = r.handle();
        metrics::with_local_recorder(&r, || {
            metrics::histogram!("x_search_duration_seconds").record(0.002);
            metrics::histogram!("x_search_rounds").record(1.0);
            metrics::counter!("x_calls_total", "outcome" => "ok").increment(2);
        });
        let text = handle.render();
        assert!(
            text.contains("x_search_duration_seconds_bucket{le=\"0.0025\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("x_search_rounds_bucket{le=\"1\"} 1"),
            "{text}"
        );
        assert!(text.contains("x_calls_total{outcome=\"ok\"} 2"), "{text}");
        assert!(render().is_none(), "nothing installed in a test process");
    }
}
