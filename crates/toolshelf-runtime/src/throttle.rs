//! A log line for a repeated event, said sparingly.
//!
//! An event that can come with every request (a session refused at a limit, one evicted to stay
//! within one) must be seen in the log without flooding it: the first is said at once, then at
//! most one line per interval, counting the events since the last line.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// When an event was last said, and how many came since.
#[derive(Debug)]
pub struct Throttle {
    every: Duration,
    state: Mutex<(Option<Instant>, u64)>,
}

impl Throttle {
    /// A throttle that says an event at most once per `every`.
    pub fn every(every: Duration) -> Self {
        Self {
            every,
            state: Mutex::new((None, 0)),
        }
    }

    /// Its interval.
    pub fn interval(&self) -> Duration {
        self.every
    }

    /// Counts one event; `Some(n)` when it is to be said now, `n` being the events since the
    /// last line (this one included).
    pub fn event(&self) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.1 += 1;
        if state.0.is_some_and(|t| t.elapsed() < self.every) {
            return None;
        }
        state.0 = Some(Instant::now());
        Some(std::mem::take(&mut state.1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_event_is_said_then_the_count_at_most_once_per_interval() {
        let t = Throttle::every(Duration::from_millis(200));
        assert_eq!(t.event(), Some(1));
        assert_eq!(t.event(), None);
        assert_eq!(t.event(), None);
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(t.event(), Some(3), "the two held back and this one");
        assert_eq!(t.event(), None);
    }
}
