//! Output shaping: the one place that cuts long output for a model.
//!
//! Long output keeps its head **and** its tail (the error at the end of a build log matters as
//! much as the command line at its start), with a marker that says how much was cut and, when
//! the caller knows, where the rest is.

use std::collections::VecDeque;

/// Bytes of shown output per shown line: a limit of `n` bytes also keeps at most `n / 30`
/// lines, so the default 30,000 bytes show at most 1,000 lines (OpenCode passes the model only
/// the first 2,000 lines of a result; head and tail must both be inside).
pub const BYTES_PER_LINE: usize = 30;

/// Text cut to fit a limit, and what was cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shaped {
    /// The text to show: head, marker, tail (or the whole text when it fit).
    pub text: String,
    /// Bytes left out.
    pub cut_bytes: u64,
    /// Whole or partial lines left out.
    pub cut_lines: u64,
    /// Bytes in the original.
    pub total_bytes: u64,
}

impl Shaped {
    /// Whether anything was cut.
    pub fn truncated(&self) -> bool {
        self.cut_bytes > 0
    }
}

/// Cut `text` to about `limit` bytes, keeping head and tail; `hint` ends the marker.
pub fn head_tail(text: &str, limit: usize, hint: Option<&str>) -> Shaped {
    let mut buf = HeadTail::new(limit);
    buf.push(text.as_bytes());
    buf.finish(hint)
}

/// A bounded buffer that keeps the first and last `limit / 2` bytes of a stream (and at most
/// `limit / BYTES_PER_LINE / 2` lines of each) and counts the rest, so a command printing
/// gigabytes costs a fixed amount of memory.
#[derive(Debug, Clone)]
pub struct HeadTail {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    head_lines_cap: u64,
    tail_lines_cap: u64,
    head_newlines: u64,
    tail_newlines: u64,
    head_full: bool,
    /// The byte just before the tail (the last one dropped), so the tail's first line is
    /// known to be whole when it is a newline.
    before_tail: u8,
    total: u64,
    total_newlines: u64,
}

impl HeadTail {
    /// A buffer that will show at most about `limit` bytes and `limit / BYTES_PER_LINE` lines.
    pub fn new(limit: usize) -> Self {
        Self::with_caps(limit, (limit / BYTES_PER_LINE) as u64)
    }

    /// A buffer that will show at most about `limit` bytes and `lines` lines.
    fn with_caps(limit: usize, lines: u64) -> Self {
        let head_cap = limit / 2;
        let lines = lines.max(2);
        Self {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_cap,
            tail_cap: limit - head_cap,
            head_lines_cap: lines / 2,
            tail_lines_cap: lines - lines / 2,
            head_newlines: 0,
            tail_newlines: 0,
            head_full: false,
            before_tail: 0,
            total: 0,
            total_newlines: 0,
        }
    }

    /// Bytes pushed so far.
    pub fn total_bytes(&self) -> u64 {
        self.total
    }

    /// Newlines pushed so far.
    pub fn total_lines(&self) -> u64 {
        self.total_newlines
    }

    /// Whether some of what was pushed is no longer kept (the result will be cut).
    pub fn cut(&self) -> bool {
        ((self.head.len() + self.tail.len()) as u64) < self.total
    }

    /// The most bytes and lines this buffer shows.
    pub fn limits(&self) -> (usize, u64) {
        (
            self.head_cap + self.tail_cap,
            self.head_lines_cap + self.tail_lines_cap,
        )
    }

    /// Append a chunk of the stream.
    pub fn push(&mut self, mut chunk: &[u8]) {
        self.total += chunk.len() as u64;
        self.total_newlines += memchr_count(chunk);
        if !self.head_full {
            let room = self.head_cap.saturating_sub(self.head.len());
            let mut take = room.min(chunk.len());
            // The head also ends after its last allowed line.
            let lines_left = self.head_lines_cap - self.head_newlines;
            if let Some(end) = nth_newline_end(&chunk[..take], lines_left) {
                take = end;
                self.head_full = true;
            }
            self.head.extend_from_slice(&chunk[..take]);
            self.head_newlines += memchr_count(&chunk[..take]);
            if self.head.len() >= self.head_cap {
                self.head_full = true;
            }
            chunk = &chunk[take..];
        }
        if chunk.is_empty() {
            return;
        }
        if chunk.len() > self.tail_cap {
            let skip = chunk.len() - self.tail_cap;
            self.before_tail = chunk[skip - 1];
            chunk = &chunk[skip..];
            self.tail.clear();
            self.tail_newlines = 0;
        }
        let overflow = (self.tail.len() + chunk.len()).saturating_sub(self.tail_cap);
        self.drop_tail_front(overflow);
        self.tail.extend(chunk);
        self.tail_newlines += memchr_count(chunk);
        self.keep_tail_lines(self.tail_lines_cap);
    }

    /// Drop `n` bytes from the front of the tail.
    fn drop_tail_front(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        let mut last = self.before_tail;
        let mut newlines = 0;
        for b in self.tail.drain(..n) {
            newlines += u64::from(b == b'\n');
            last = b;
        }
        self.tail_newlines -= newlines;
        self.before_tail = last;
    }

    /// Keep only the tail's last `lines` lines: drop whole lines from its front.
    fn keep_tail_lines(&mut self, lines: u64) {
        while self.tail_newlines > lines {
            match self.tail.iter().position(|&b| b == b'\n') {
                Some(i) => self.drop_tail_front(i + 1),
                None => break,
            }
        }
    }

    /// The shaped text within at most `max_bytes` and `max_lines` (fewer than this buffer
    /// keeps: the share of one stream when several split a budget), and what was cut.
    pub fn finish_within(mut self, max_bytes: usize, max_lines: u64, hint: Option<&str>) -> Shaped {
        if !self.cut() {
            // All of it is here: shape it afresh.
            let mut small = Self::with_caps(max_bytes, max_lines);
            small.push(&self.head);
            small.push(self.tail.make_contiguous());
            return small.finish(hint);
        }
        let head_cap = self.head_cap.min(max_bytes / 2);
        let tail_cap = self.tail_cap.min(max_bytes - max_bytes / 2);
        let max_lines = max_lines.max(2);
        let head_lines = self.head_lines_cap.min(max_lines / 2);
        let tail_lines = self.tail_lines_cap.min(max_lines - max_lines / 2);
        let mut head_end = self.head.len().min(head_cap);
        if let Some(end) = nth_newline_end(&self.head[..head_end], head_lines) {
            head_end = end;
        }
        self.head.truncate(head_end);
        self.drop_tail_front(self.tail.len().saturating_sub(tail_cap));
        self.keep_tail_lines(tail_lines);
        self.finish(hint)
    }

    /// The shaped text (lossy UTF-8) and what was cut; `hint` ends the marker.
    pub fn finish(self, hint: Option<&str>) -> Shaped {
        let tail: Vec<u8> = self.tail.into_iter().collect();
        let kept = (self.head.len() + tail.len()) as u64;
        if kept == self.total {
            let mut all = self.head;
            all.extend_from_slice(&tail);
            return Shaped {
                text: String::from_utf8_lossy(&all).into_owned(),
                cut_bytes: 0,
                cut_lines: 0,
                total_bytes: self.total,
            };
        }
        // Cut at line boundaries when that loses less than half of each side.
        let head_end = match self.head.iter().rposition(|&b| b == b'\n') {
            Some(i) if i + 1 >= self.head.len() / 2 => i + 1,
            _ => self.head.len(),
        };
        let tail_start = match tail.iter().position(|&b| b == b'\n') {
            _ if self.before_tail == b'\n' => 0,
            Some(i) if i < tail.len() / 2 => i + 1,
            _ => 0,
        };
        let head = &self.head[..head_end];
        let tail = &tail[tail_start..];
        let head_newlines = memchr_count(head);
        let tail_newlines = memchr_count(tail);
        let cut_bytes = self.total - (head.len() + tail.len()) as u64;
        let cut_lines = self
            .total_newlines
            .saturating_sub(head_newlines + tail_newlines)
            .max(1);
        let mut text = String::from_utf8_lossy(head).into_owned();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!(
            "[... {cut_bytes} bytes ({cut_lines} lines) cut from the middle of {} bytes",
            self.total
        ));
        if let Some(h) = hint {
            text.push_str("; ");
            text.push_str(h);
        }
        text.push_str(" ...]\n");
        text.push_str(&String::from_utf8_lossy(tail));
        Shaped {
            text,
            cut_bytes,
            cut_lines,
            total_bytes: self.total,
        }
    }
}

/// The end (one past) of the `n`-th newline of `bytes`, if it has `n` (or, for `n == 0`, 0).
fn nth_newline_end(bytes: &[u8], n: u64) -> Option<usize> {
    if n == 0 {
        return Some(0);
    }
    bytes
        .iter()
        .enumerate()
        .filter(|&(_, &b)| b == b'\n')
        .nth(n as usize - 1)
        .map(|(i, _)| i + 1)
}

fn memchr_count(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|&&b| b == b'\n').count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn short_text_is_untouched() {
        let s = head_tail("a\nb\n", 100, None);
        assert_eq!(s.text, "a\nb\n");
        assert!(!s.truncated());
    }

    #[test]
    fn long_text_keeps_head_and_tail_and_says_what_was_cut() {
        let text: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        let s = head_tail(&text, 200, Some("full output in /tmp/x"));
        assert!(s.text.starts_with("line 0\n"));
        assert!(s.text.ends_with("line 999\n"));
        assert!(s.text.contains("lines) cut from the middle"));
        assert!(s.text.contains("full output in /tmp/x"));
        assert_eq!(s.total_bytes, text.len() as u64);
        assert!(s.cut_lines > 900);
    }

    #[test]
    fn many_short_lines_are_cut_by_lines_keeping_first_and_last() {
        let text: String = (1..=100_000).map(|i| format!("{i}\n")).collect();
        let s = head_tail(&text, 30_000, None);
        assert!(s.text.starts_with("1\n2\n"));
        assert!(s.text.ends_with("\n99999\n100000\n"));
        let lines = s.text.lines().count();
        assert!(
            lines <= 1_001,
            "{lines} lines shown for a 30,000-byte limit"
        );
        assert!(s.text.contains("cut from the middle"));
    }

    #[test]
    fn a_smaller_share_keeps_head_and_tail_within_it() {
        let text: String = (1..=2000).map(|i| format!("{i}\n")).collect();
        let mut buf = HeadTail::new(30_000);
        buf.push(text.as_bytes());
        let s = buf.finish_within(3_000, 100, Some("see f"));
        assert!(s.text.starts_with("1\n2\n"), "{}", s.text);
        assert!(s.text.ends_with("1999\n2000\n"), "{}", s.text);
        assert_eq!(s.text.lines().count(), 101, "{}", s.text);
        assert!(s.text.contains("(1900 lines) cut") && s.text.contains("see f"));
    }

    proptest! {
        #[test]
        fn a_share_equals_a_buffer_of_that_size(text in "[a-z\n]{0,3000}", limit in 1usize..1000) {
            // Shrinking a bigger buffer to `limit` shows what a buffer of `limit` would.
            let mut big = HeadTail::new(limit * 3);
            big.push(text.as_bytes());
            let (bytes, lines) = HeadTail::new(limit).limits();
            prop_assert_eq!(big.finish_within(bytes, lines, None), head_tail(&text, limit, None));
        }

        #[test]
        fn cut_says_whether_finish_will_cut(chunks in proptest::collection::vec("[a-z\n]{0,50}", 0..40), limit in 1usize..300) {
            let mut buf = HeadTail::new(limit);
            for c in &chunks { buf.push(c.as_bytes()); }
            let cut = buf.cut();
            prop_assert_eq!(cut, buf.finish(None).truncated());
        }

        #[test]
        fn shown_lines_stay_within_the_line_cap(n in 0usize..5000, limit in 60usize..3000) {
            let text: String = (0..n).map(|i| format!("{i}\n")).collect();
            let s = head_tail(&text, limit, None);
            // The lines kept plus one marker line.
            prop_assert!(s.text.lines().count() as u64 <= (limit / BYTES_PER_LINE) as u64 + 1);
        }

        #[test]
        fn streaming_equals_one_push(chunks in proptest::collection::vec("[a-z\n]{0,50}", 0..40), limit in 1usize..300) {
            let whole: String = chunks.concat();
            let mut buf = HeadTail::new(limit);
            for c in &chunks { buf.push(c.as_bytes()); }
            prop_assert_eq!(buf.finish(None), head_tail(&whole, limit, None));
        }

        #[test]
        fn kept_plus_cut_is_total(text in "[a-z\n]{0,2000}", limit in 1usize..500) {
            let s = head_tail(&text, limit, None);
            if s.truncated() {
                let marker_start = s.text.find("[... ").unwrap();
                let marker_end = s.text[marker_start..].find(" ...]\n").unwrap() + marker_start + 6;
                let kept = marker_start - usize::from(s.text[..marker_start].ends_with('\n') && !text[..marker_start].ends_with('\n'))
                    + (s.text.len() - marker_end);
                prop_assert!(kept as u64 + s.cut_bytes <= text.len() as u64 + 1);
                prop_assert!(s.cut_bytes > 0);
                prop_assert!(s.text.len() <= limit + 200);
            } else {
                prop_assert_eq!(&s.text, &text);
            }
        }
    }
}
