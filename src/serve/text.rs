//! A sequence's text as it grows: stop strings (the sequence ends once its text contains one, and the reply is cut
//! before it) and the pieces a stream may send (never a piece that a stop string could still take back, nor half a
//! character), plus each token's bytes for log-probabilities.

use crate::chat::Tokenizer;

/// Watches a growing text for stop strings and hands out the part that is safe to send.
#[derive(Debug, Clone, Default)]
pub(crate) struct StopScan {
    stops: Vec<String>,
    /// Bytes of the text handed out so far.
    sent: usize,
    /// Where the first stop string begins, once one appeared.
    hit: Option<usize>,
}

impl StopScan {
    /// A scan for `stops` (none empty).
    pub fn new(stops: Vec<String>) -> Self {
        Self {
            stops,
            ..Self::default()
        }
    }

    /// Whether there is no stop string to watch for.
    pub(crate) fn stops_nothing(&self) -> bool {
        self.stops.is_empty()
    }

    /// Whether a stop string has appeared.
    pub fn stopped(&self) -> bool {
        self.hit.is_some()
    }

    /// `text` (the whole decoded text so far) cut before the first stop string.
    pub fn reply<'t>(&self, text: &'t str) -> &'t str {
        &text[..self.hit.unwrap_or(text.len()).min(text.len())]
    }

    /// The new part of `text` that can be sent now: all of it up to a stop string, else all but a tail that could
    /// still become a stop string or a character (a trailing U+FFFD stands for bytes of a character still to come);
    /// with `finished`, everything up to the end or the stop string.
    pub(crate) fn advance(&mut self, text: &str, finished: bool) -> String {
        if self.hit.is_none() {
            self.hit = self
                .stops
                .iter()
                .filter_map(|s| text.find(s.as_str()))
                .min();
        }
        let end = match self.hit {
            Some(at) => at,
            None if finished => text.len(),
            None => self.safe_end(text),
        };
        if end <= self.sent || !text.is_char_boundary(self.sent) {
            return String::new();
        }
        let piece = text[self.sent..end].to_string();
        self.sent = end;
        piece
    }

    /// The end of the part of `text` that no later token can change or turn into a stop string.
    fn safe_end(&self, text: &str) -> usize {
        let base = text.trim_end_matches('\u{FFFD}').len();
        // The longest proper prefix of a stop string that the text ends with.
        let held = self
            .stops
            .iter()
            .filter_map(|stop| {
                stop.char_indices()
                    .skip(1)
                    .map(|(i, _)| i)
                    .filter(|&i| text[..base].ends_with(&stop[..i]))
                    .max()
            })
            .max()
            .unwrap_or(0);
        base - held
    }
}

/// Each token's bytes: Qwen's tokenizer is byte-level BPE, whose vocabulary writes every byte as one printable
/// character (GPT-2's table, `bytes_to_unicode` in openai/gpt-2 `src/encoder.py`): bytes 33–126, 161–172 and
/// 174–255 stand for themselves, the other 68 for the characters from U+0100 on, in byte order.
pub(crate) fn token_bytes(tokenizer: &Tokenizer, id: u32) -> Vec<u8> {
    let Some(piece) = tokenizer.inner().id_to_token(id) else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(piece.len());
    for c in piece.chars() {
        match byte_of(c) {
            Some(b) => out.push(b),
            // Not byte-level text (an added token such as `<|im_end|>` is plain ASCII, which maps to itself).
            None => return piece.into_bytes(),
        }
    }
    out
}

/// The most bytes one token of the vocabulary (added tokens included) stands for.
pub(crate) fn longest_token_bytes(tokenizer: &Tokenizer) -> usize {
    let n = tokenizer.inner().get_vocab_size(true) as u32;
    (0..n)
        .map(|id| token_bytes(tokenizer, id).len())
        .max()
        .unwrap_or(1)
        .max(1)
}

/// The byte GPT-2's table writes as `c`.
fn byte_of(c: char) -> Option<u8> {
    let stands_for_itself =
        |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let code = c as u32;
    if code < 256 {
        return stands_for_itself(code).then_some(code as u8);
    }
    let n = code - 256;
    (0u32..256)
        .filter(|&b| !stands_for_itself(b))
        .nth(n as usize)
        .map(|b| b as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `text`'s growing prefixes (split at `cuts`) and collect what is sent.
    fn stream(stops: &[&str], steps: &[&str]) -> (String, StopScan) {
        let mut scan = StopScan::new(stops.iter().map(|s| s.to_string()).collect());
        let mut sent = String::new();
        let mut text = String::new();
        for s in steps {
            text.push_str(s);
            sent.push_str(&scan.advance(&text, false));
            if scan.stopped() {
                return (sent, scan);
            }
        }
        sent.push_str(&scan.advance(&text, true));
        (sent, scan)
    }

    #[test]
    fn a_stop_string_across_tokens_is_never_sent() {
        let (sent, scan) = stream(&["</end>"], &["Hello <", "/en", "d> more"]);
        assert_eq!(sent, "Hello ");
        assert!(scan.stopped());
        assert_eq!(scan.reply("Hello </end> more"), "Hello ");
    }

    #[test]
    fn a_held_prefix_that_does_not_become_a_stop_is_sent_later() {
        let (sent, scan) = stream(&["STOP"], &["a S", "T", "x b"]);
        assert_eq!(sent, "a STx b");
        assert!(!scan.stopped());
    }

    #[test]
    fn half_characters_wait_for_their_rest() {
        let mut scan = StopScan::new(Vec::new());
        assert_eq!(scan.advance("ab\u{FFFD}", false), "ab");
        assert_eq!(scan.advance("ab中", false), "中");
        assert_eq!(scan.advance("ab中", true), "");
    }

    #[test]
    fn the_earliest_of_several_stops_wins() {
        let mut scan = StopScan::new(vec!["c".into(), "b".into()]);
        assert_eq!(scan.advance("xabc", false), "xa");
        assert_eq!(scan.reply("xabc"), "xa");
    }

    #[test]
    fn gpt2_byte_table() {
        assert_eq!(byte_of('A'), Some(b'A'));
        assert_eq!(byte_of('\u{0120}'), Some(b' ')); // Ġ: the space
        assert_eq!(byte_of('\u{010A}'), Some(b'\n')); // Ċ: the newline
        assert_eq!(byte_of('\u{0100}'), Some(0));
        assert_eq!(byte_of('\u{0143}'), Some(173)); // the last of the 68
        assert_eq!(byte_of('\u{0144}'), None);
        assert_eq!(byte_of('é'), Some(0xE9));
    }
}
