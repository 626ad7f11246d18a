//! A reader for the YAML subset the example manifests are written in: block mappings and sequences, plain and
//! double-quoted scalars, comments, `---` between documents. Everything else (flow collections, anchors, tags,
//! block scalars, tabs) is an error, so a file it accepts means the same to a full YAML parser (kubectl's).
//! Scalars stay text. Chosen over a YAML crate so the tests need no new dependency (serde_yaml is no longer
//! maintained) for one hand-written file.

/// A node: text, sequence, or mapping (keys in file order).
#[derive(Debug, Clone, PartialEq)]
pub enum Yaml {
    /// A scalar (also an empty value).
    Str(String),
    /// A block sequence.
    Seq(Vec<Yaml>),
    /// A block mapping.
    Map(Vec<(String, Yaml)>),
}

impl Yaml {
    /// The value under a chain of mapping keys.
    pub fn at(&self, keys: &[&str]) -> Option<&Yaml> {
        keys.iter().try_fold(self, |node, k| match node {
            Yaml::Map(m) => m.iter().find(|(key, _)| key == k).map(|(_, v)| v),
            _ => None,
        })
    }

    /// The text of a scalar.
    pub fn text(&self) -> Option<&str> {
        match self {
            Yaml::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The items of a sequence.
    pub fn items(&self) -> Option<&[Yaml]> {
        match self {
            Yaml::Seq(v) => Some(v),
            _ => None,
        }
    }
}

struct Line {
    number: usize,
    indent: usize,
    text: String,
}

/// Cut a ` #` comment that is outside double quotes.
fn strip_comment(s: &str) -> &str {
    let mut quoted = false;
    let bytes = s.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'"' if i == 0 || bytes[i - 1] != b'\\' => quoted = !quoted,
            b'#' if !quoted && (i == 0 || bytes[i - 1] == b' ') => return s[..i].trim_end(),
            _ => {}
        }
    }
    s.trim_end()
}

/// Parse every document of a file.
pub fn parse_documents(text: &str) -> Result<Vec<Yaml>, String> {
    let mut docs = vec![Vec::new()];
    for (i, raw) in text.lines().enumerate() {
        let body = raw.trim_start_matches(' ');
        if body.starts_with('\t') {
            return Err(format!("line {}: tab in indentation", i + 1));
        }
        let content = strip_comment(body);
        if content == "---" {
            docs.push(Vec::new());
        } else if !content.is_empty() {
            docs.last_mut().unwrap().push(Line {
                number: i + 1,
                indent: raw.len() - body.len(),
                text: content.to_string(),
            });
        }
    }
    let mut out = Vec::new();
    for lines in docs.into_iter().filter(|d| !d.is_empty()) {
        let mut p = Parser { lines, pos: 0 };
        let indent = p.lines[0].indent;
        out.push(p.block(indent)?);
        if let Some(l) = p.lines.get(p.pos) {
            return Err(format!("line {}: unexpected indentation", l.number));
        }
    }
    Ok(out)
}

struct Parser {
    lines: Vec<Line>,
    pos: usize,
}

fn is_item(text: &str) -> bool {
    text == "-" || text.starts_with("- ")
}

fn split_key(text: &str) -> Option<(&str, &str)> {
    if let Some(k) = text.strip_suffix(':') {
        return Some((k, ""));
    }
    text.split_once(": ").map(|(k, v)| (k, v.trim()))
}

fn scalar(s: &str, line: usize) -> Result<Yaml, String> {
    if let Some(inner) = s.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        return Ok(Yaml::Str(inner.replace("\\\"", "\"").replace("\\\\", "\\")));
    }
    let first = s.chars().next().unwrap_or(' ');
    if "[{&*!|>'%@`\"".contains(first) || s.contains(": ") {
        return Err(format!(
            "line {line}: {s:?} is outside the supported YAML subset"
        ));
    }
    Ok(Yaml::Str(s.to_string()))
}

impl Parser {
    fn block(&mut self, indent: usize) -> Result<Yaml, String> {
        if is_item(&self.lines[self.pos].text) {
            self.seq(indent)
        } else {
            self.map(indent)
        }
    }

    /// The value after `key:` with nothing on its line: a deeper block, a sequence at the key's own indent, or
    /// empty.
    fn nested(&mut self, indent: usize) -> Result<Yaml, String> {
        match self.lines.get(self.pos) {
            Some(l) if l.indent > indent => {
                let i = l.indent;
                self.block(i)
            }
            Some(l) if l.indent == indent && is_item(&l.text) => self.seq(indent),
            _ => Ok(Yaml::Str(String::new())),
        }
    }

    fn seq(&mut self, indent: usize) -> Result<Yaml, String> {
        let mut items = Vec::new();
        while let Some(l) = self
            .lines
            .get(self.pos)
            .filter(|l| l.indent == indent && is_item(&l.text))
        {
            let rest = l.text[1..].trim_start().to_string();
            let (number, column) = (l.number, indent + (l.text.len() - rest.len()));
            if rest.is_empty() {
                self.pos += 1;
                items.push(self.nested(indent)?);
            } else if split_key(&rest).is_some() && !rest.starts_with('"') {
                // `- key: value` opens a mapping whose keys sit at the column after the dash.
                self.lines[self.pos] = Line {
                    number,
                    indent: column,
                    text: rest,
                };
                items.push(self.map(column)?);
            } else {
                self.pos += 1;
                items.push(scalar(&rest, number)?);
            }
        }
        Ok(Yaml::Seq(items))
    }

    fn map(&mut self, indent: usize) -> Result<Yaml, String> {
        let mut entries: Vec<(String, Yaml)> = Vec::new();
        while let Some(l) = self
            .lines
            .get(self.pos)
            .filter(|l| l.indent == indent && !is_item(&l.text))
        {
            let number = l.number;
            let (key, value) = split_key(&l.text)
                .ok_or_else(|| format!("line {number}: expected `key: value`"))?;
            let (key, value) = (key.to_string(), value.to_string());
            if entries.iter().any(|(k, _)| *k == key) {
                return Err(format!("line {number}: duplicate key {key:?}"));
            }
            self.pos += 1;
            let v = if value.is_empty() {
                self.nested(indent)?
            } else {
                scalar(&value, number)?
            };
            entries.push((key, v));
        }
        if let Some(l) = self.lines.get(self.pos).filter(|l| l.indent > indent) {
            return Err(format!("line {}: unexpected indentation", l.number));
        }
        Ok(Yaml::Map(entries))
    }
}
