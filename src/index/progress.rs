//! Progress and cancellation of long jobs (indexing, embedding).
//!
//! A [`Reporter`] is handed to a job: it draws a terminal bar when asked,
//! forwards updates to a callback (the MCP server turns them into progress
//! notifications), and carries the cancellation flag the job polls.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often a callback hears of progress (the last update is always sent).
const CALLBACK_EVERY: Duration = Duration::from_millis(200);

/// One progress report: `done` of `total` items of `phase`.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    pub phase: &'static str,
    pub done: u64,
    pub total: u64,
}

type Sink = Arc<dyn Fn(&Update) + Send + Sync>;

#[derive(Clone, Default)]
pub struct Reporter {
    terminal: bool,
    sink: Option<Sink>,
    cancel: Option<Arc<AtomicBool>>,
}

impl std::fmt::Debug for Reporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reporter")
            .field("terminal", &self.terminal)
            .field("sink", &self.sink.is_some())
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

impl Reporter {
    /// Silent unless `terminal`, then a bar on stderr.
    pub fn terminal(terminal: bool) -> Reporter {
        Reporter {
            terminal,
            ..Reporter::default()
        }
    }

    pub fn with_sink(mut self, sink: impl Fn(&Update) + Send + Sync + 'static) -> Reporter {
        self.sink = Some(Arc::new(sink));
        self
    }

    pub fn with_cancel(mut self, flag: Arc<AtomicBool>) -> Reporter {
        self.cancel = Some(flag);
        self
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed))
    }

    /// Fails with a message saying committed work is kept, once cancelled.
    pub fn check_cancelled(&self, what: &str) -> anyhow::Result<()> {
        if self.is_cancelled() {
            anyhow::bail!("{what} cancelled; the work committed so far is kept and the next run continues from it");
        }
        Ok(())
    }

    /// Starts reporting `total` items of `phase` ("indexing" files, "embedding" chunks).
    pub fn phase(&self, phase: &'static str, unit: &str, total: u64) -> Phase {
        let phase = Phase {
            bar: progress_bar(self.terminal, total, phase, unit),
            sink: self.sink.clone(),
            update: Update { phase, done: 0, total },
            last_sent: Instant::now(),
        };
        phase.send();
        phase
    }
}

pub struct Phase {
    bar: ProgressBar,
    sink: Option<Sink>,
    update: Update,
    last_sent: Instant,
}

impl Phase {
    pub fn inc(&mut self, n: u64) {
        self.bar.inc(n);
        self.update.done += n;
        if self.sink.is_some() && self.last_sent.elapsed() >= CALLBACK_EVERY {
            self.last_sent = Instant::now();
            self.send();
        }
    }

    fn send(&self) {
        if let Some(sink) = &self.sink {
            sink(&self.update);
        }
    }
}

impl Drop for Phase {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
        self.send();
    }
}

/// A progress bar on stderr (hidden when disabled or empty): "`verb` [...] n/len `unit`".
fn progress_bar(enabled: bool, len: u64, verb: &str, unit: &str) -> ProgressBar {
    if !enabled || len == 0 {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{spinner}} {verb} [{{bar:30}}] {{pos}}/{{len}} {unit} ({{per_sec}}, {{eta}})"
        ))
        .expect("valid progress template")
        .progress_chars("=> "),
    );
    bar
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn a_sink_hears_the_start_and_the_final_count() {
        let heard = Arc::new(Mutex::new(Vec::new()));
        let sink = heard.clone();
        let reporter = Reporter::default().with_sink(move |u| sink.lock().unwrap().push(u.clone()));
        {
            let mut phase = reporter.phase("indexing", "files", 3);
            phase.inc(1);
            phase.inc(2);
        }
        let heard = heard.lock().unwrap();
        assert_eq!(heard.first().map(|u| u.done), Some(0));
        assert_eq!(
            heard.last(),
            Some(&Update {
                phase: "indexing",
                done: 3,
                total: 3
            })
        );
    }

    #[test]
    fn cancellation_is_seen_through_clones() {
        let flag = Arc::new(AtomicBool::new(false));
        let reporter = Reporter::default().with_cancel(flag.clone());
        let copy = reporter.clone();
        assert!(copy.check_cancelled("indexing").is_ok());
        flag.store(true, Ordering::Relaxed);
        let err = copy.check_cancelled("indexing").unwrap_err().to_string();
        assert!(err.contains("cancelled") && err.contains("kept"), "{err}");
    }
}
