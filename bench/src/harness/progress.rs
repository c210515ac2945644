//! The progress line of a long run: elapsed time, events per second and the current p99,
//! redrawn in place on stderr (indicatif), and silent when stderr is not a terminal, so
//! logs and CI output stay clean.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// One run's progress line.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    started: Instant,
    label: String,
}

/// The line's text.
#[must_use]
pub fn progress_text(label: &str, elapsed: Duration, events: u64, p99_us: Option<u64>) -> String {
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 { events as f64 / secs } else { 0.0 };
    let mut text = format!("{label}: {secs:.1} s, {:.2} M events/s", rate / 1e6);
    if let Some(p99) = p99_us {
        text.push_str(&format!(", p99 {p99} us"));
    }
    text
}

impl Progress {
    /// A progress line for `label`, drawn at most 10 times a second (none when stderr is
    /// not a terminal).
    #[must_use]
    pub fn start(label: &str) -> Progress {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(10));
        bar.set_style(ProgressStyle::with_template("{msg}").expect("a valid template"));
        Progress { bar, started: Instant::now(), label: label.to_string() }
    }

    /// Whether the line is drawn at all.
    #[must_use]
    pub fn is_drawn(&self) -> bool {
        !self.bar.is_hidden()
    }

    /// Shows `events` done so far and the current p99.
    pub fn update(&self, events: u64, p99_us: Option<u64>) {
        if self.is_drawn() {
            self.bar.set_message(progress_text(&self.label, self.started.elapsed(), events, p99_us));
        }
    }

    /// Removes the line.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_shows_elapsed_rate_and_p99() {
        let text = progress_text("pipeline", Duration::from_secs(2), 3_000_000, Some(840));
        assert_eq!(text, "pipeline: 2.0 s, 1.50 M events/s, p99 840 us");
        assert_eq!(progress_text("log", Duration::ZERO, 5, None), "log: 0.0 s, 0.00 M events/s");
        // Under `cargo test` stderr is captured or a pipe: the line stays silent there, and
        // updating it is harmless either way.
        let p = Progress::start("x");
        p.update(1, None);
        p.finish();
    }
}
