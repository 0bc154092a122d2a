//! Server-sent events: an incremental reader for upstream streams and the writer for the
//! client's.
//!
//! The reader follows the WHATWG rules the providers' streams rely on: lines end in `\n`, `\r\n`
//! or `\r`; `event:` names the event, `data:` lines join with `\n`; a blank line dispatches;
//! comments (`:`) and unknown fields are ignored; one space after the colon is dropped. Bytes
//! arrive in arbitrary chunks, so a line (or a UTF-8 sequence) may be split between two.

use serde_json::Value;

/// One event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// The `data:` lines, joined.
    pub data: String,
}

impl Event {
    /// The data as JSON, if it is.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_str(&self.data).ok()
    }
}

/// Reads events out of a byte stream.
#[derive(Debug, Default)]
pub struct Reader {
    buf: Vec<u8>,
    event: Option<String>,
    data: Vec<String>,
    has_data: bool,
    /// A `\r` ended the last chunk: a `\n` opening the next belongs to it.
    after_cr: bool,
}

impl Reader {
    /// Feeds bytes; returns the events they completed.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<Event> {
        let mut out = Vec::new();
        let mut bytes = bytes;
        if self.after_cr && bytes.first() == Some(&b'\n') {
            bytes = &bytes[1..];
        }
        self.after_cr = false;
        self.buf.extend_from_slice(bytes);
        let mut start = 0;
        let mut i = 0;
        while i < self.buf.len() {
            let b = self.buf[i];
            if b == b'\n' || b == b'\r' {
                let line = String::from_utf8_lossy(&self.buf[start..i]).into_owned();
                if b == b'\r' {
                    if i + 1 < self.buf.len() {
                        if self.buf[i + 1] == b'\n' {
                            i += 1;
                        }
                    } else {
                        self.after_cr = true;
                    }
                }
                self.line(&line, &mut out);
                start = i + 1;
            }
            i += 1;
        }
        self.buf.drain(..start);
        out
    }

    /// Whether bytes of an unfinished line or event are waiting.
    pub fn pending(&self) -> bool {
        !self.buf.is_empty() || self.has_data
    }

    fn line(&mut self, line: &str, out: &mut Vec<Event>) {
        if line.is_empty() {
            if self.has_data {
                out.push(Event {
                    event: self.event.take(),
                    data: std::mem::take(&mut self.data).join("\n"),
                });
            }
            self.event = None;
            self.has_data = false;
            self.data.clear();
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => {
                self.data.push(value.to_owned());
                self.has_data = true;
            }
            _ => {}
        }
    }
}

/// Writes one event: `event: NAME` when named, then the data line(s), then a blank line.
pub fn write(out: &mut Vec<u8>, event: Option<&str>, data: &str) {
    if let Some(e) = event {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(e.as_bytes());
        out.push(b'\n');
    }
    for line in data.split('\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
}

/// Writes one JSON event.
pub fn write_json(out: &mut Vec<u8>, event: Option<&str>, data: &Value) {
    write(out, event, &data.to_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_anywhere_read_the_same() {
        let text = "event: a\ndata: {\"x\":1}\n\n: comment\ndata: two\ndata: lines\r\n\r\nevent: b\rdata:x\r\r";
        let whole = Reader::default().feed(text.as_bytes());
        assert_eq!(
            whole,
            vec![
                Event {
                    event: Some("a".into()),
                    data: "{\"x\":1}".into()
                },
                Event {
                    event: None,
                    data: "two\nlines".into()
                },
                Event {
                    event: Some("b".into()),
                    data: "x".into()
                },
            ]
        );
        for cut in 0..text.len() {
            let mut r = Reader::default();
            let mut got = r.feed(&text.as_bytes()[..cut]);
            got.extend(r.feed(&text.as_bytes()[cut..]));
            assert_eq!(got, whole, "cut at {cut}");
            assert!(!r.pending());
        }
    }

    #[test]
    fn written_events_read_back() {
        let mut out = Vec::new();
        write(&mut out, Some("x"), "a\nb");
        write(&mut out, None, "[DONE]");
        let back = Reader::default().feed(&out);
        assert_eq!(back[0].event.as_deref(), Some("x"));
        assert_eq!(back[0].data, "a\nb");
        assert_eq!(back[1].data, "[DONE]");
    }
}
