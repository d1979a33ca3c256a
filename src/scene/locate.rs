//! Finds where a value sits in a RON source, so that errors found after deserialisation
//! (an unknown legend character, a team without spawn cells, a parameter out of range) can
//! still point at `line:column`. serde forgets positions; this small structural scanner
//! recovers them. It understands comments, strings, chars, raw strings, structs, tuples,
//! enum variants, lists and maps, and nothing more: positions only, no values.

/// A step of a path into the document.
#[derive(Debug, Clone, Copy)]
pub enum Seg<'a> {
    /// A named struct field.
    Field(&'a str),
    /// The `i`-th element of a list or tuple, or the `i`-th entry of a map.
    Index(usize),
}

#[derive(Debug)]
enum Node {
    /// A scalar or identifier: only its start matters.
    Atom,
    /// `Name( field: v, ... )` or `( field: v, ...)`.
    Struct(Vec<(String, usize, Node)>),
    /// `Name( v, ... )`, `( v, ... )` or `[ v, ... ]`; items with their offsets.
    Seq(Vec<(usize, Node)>),
    /// `{ k: v, ... }`: entries at the key's offset, with the value.
    Map(Vec<(usize, Node)>),
}

struct Scanner<'s> {
    src: &'s [u8],
    pos: usize,
}

impl<'s> Scanner<'s> {
    fn rest(&self) -> &'s [u8] {
        self.src.get(self.pos..).unwrap_or(&[])
    }

    fn skip_ws(&mut self) {
        loop {
            self.pos = self.pos.min(self.src.len());
            while self.pos < self.src.len() && self.src[self.pos].is_ascii_whitespace() {
                self.pos += 1;
            }
            if self.rest().starts_with(b"//") {
                while self.pos < self.src.len() && self.src[self.pos] != b'\n' {
                    self.pos += 1;
                }
            } else if self.rest().starts_with(b"/*") {
                let mut depth = 0usize;
                while self.pos < self.src.len() {
                    if self.rest().starts_with(b"/*") {
                        depth += 1;
                        self.pos += 2;
                    } else if self.rest().starts_with(b"*/") {
                        depth -= 1;
                        self.pos += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        self.pos += 1;
                    }
                }
            } else {
                return;
            }
        }
    }

    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    fn is_ident_byte(b: u8) -> bool {
        b.is_ascii_alphanumeric() || b == b'_' || b == b'#' || b >= 0x80
    }

    fn skip_quoted(&mut self, quote: u8) {
        self.pos += 1;
        while self.pos < self.src.len() {
            match self.src[self.pos] {
                b'\\' => self.pos += 2,
                b if b == quote => {
                    self.pos += 1;
                    return;
                }
                _ => self.pos += 1,
            }
        }
    }

    fn skip_raw_string(&mut self) {
        // r"..." or r#"..."#
        self.pos += 1;
        let mut hashes = 0;
        while self.peek() == Some(b'#') {
            hashes += 1;
            self.pos += 1;
        }
        self.pos += 1; // opening quote
        while self.pos < self.src.len() {
            if self.src[self.pos] == b'"'
                && self.src[self.pos + 1..]
                    .iter()
                    .take(hashes)
                    .filter(|&&b| b == b'#')
                    .count()
                    == hashes
            {
                self.pos += 1 + hashes;
                return;
            }
            self.pos += 1;
        }
    }

    /// Parses one value; returns its node. Never fails: on anything unexpected it stops.
    fn value(&mut self, depth: usize) -> Node {
        self.skip_ws();
        if depth > 64 {
            return Node::Atom;
        }
        match self.peek() {
            Some(b'(') => self.parens(depth),
            Some(b'[') => {
                self.pos += 1;
                Node::Seq(self.items(b']', depth))
            }
            Some(b'{') => self.map(depth),
            Some(b'"') => {
                self.skip_quoted(b'"');
                Node::Atom
            }
            Some(b'\'') => {
                self.skip_quoted(b'\'');
                Node::Atom
            }
            Some(b'r') if matches!(self.src.get(self.pos + 1), Some(b'"') | Some(b'#')) => {
                self.skip_raw_string();
                Node::Atom
            }
            Some(b) if Self::is_ident_byte(b) || b == b'-' || b == b'+' || b == b'.' => {
                while let Some(b) = self.peek() {
                    if Self::is_ident_byte(b) || b == b'-' || b == b'+' || b == b'.' {
                        self.pos += 1;
                    } else {
                        break;
                    }
                }
                self.skip_ws();
                if self.peek() == Some(b'(') {
                    self.parens(depth)
                } else {
                    Node::Atom
                }
            }
            _ => Node::Atom,
        }
    }

    /// `(` already seen at `self.pos`: a struct body or a tuple body.
    fn parens(&mut self, depth: usize) -> Node {
        self.pos += 1;
        self.skip_ws();
        // A struct if the first thing is `ident :` (but not `::`).
        let save = self.pos;
        let start = self.pos;
        while let Some(b) = self.peek() {
            if Self::is_ident_byte(b) {
                self.pos += 1
            } else {
                break;
            }
        }
        let ident_end = self.pos;
        self.skip_ws();
        let is_struct = ident_end > start && self.peek() == Some(b':');
        self.pos = save;
        if !is_struct {
            return Node::Seq(self.items(b')', depth));
        }
        let mut fields = Vec::new();
        loop {
            self.skip_ws();
            match self.peek() {
                None => break,
                Some(b')') => {
                    self.pos += 1;
                    break;
                }
                Some(b',') => {
                    self.pos += 1;
                    continue;
                }
                _ => {}
            }
            let name_start = self.pos;
            while let Some(b) = self.peek() {
                if Self::is_ident_byte(b) {
                    self.pos += 1
                } else {
                    break;
                }
            }
            if self.pos == name_start {
                // Not a field name: skip one byte to guarantee progress.
                self.pos += 1;
                continue;
            }
            let name = String::from_utf8_lossy(&self.src[name_start..self.pos]).into_owned();
            self.skip_ws();
            if self.peek() == Some(b':') {
                self.pos += 1;
            }
            let node = self.value(depth + 1);
            fields.push((name, name_start, node));
        }
        Node::Struct(fields)
    }

    fn items(&mut self, close: u8, depth: usize) -> Vec<(usize, Node)> {
        let mut items = Vec::new();
        loop {
            self.skip_ws();
            match self.peek() {
                None => break,
                Some(b) if b == close => {
                    self.pos += 1;
                    break;
                }
                Some(b',') => {
                    self.pos += 1;
                    continue;
                }
                Some(b')') | Some(b']') | Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                _ => {}
            }
            let at = self.pos;
            let node = self.value(depth + 1);
            if self.pos == at {
                self.pos += 1;
            }
            items.push((at, node));
        }
        items
    }

    fn map(&mut self, depth: usize) -> Node {
        self.pos += 1;
        let mut entries = Vec::new();
        loop {
            self.skip_ws();
            match self.peek() {
                None => break,
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                Some(b',') => {
                    self.pos += 1;
                    continue;
                }
                _ => {}
            }
            let at = self.pos;
            let _key = self.value(depth + 1);
            self.skip_ws();
            if self.peek() == Some(b':') {
                self.pos += 1;
            }
            let node = self.value(depth + 1);
            if self.pos == at {
                self.pos += 1;
            }
            entries.push((at, node));
        }
        Node::Map(entries)
    }
}

/// Byte offset of the value at `path` in `src` (the field's name for a field), if found.
pub fn locate(src: &str, path: &[Seg<'_>]) -> Option<usize> {
    let mut sc = Scanner {
        src: src.as_bytes(),
        pos: 0,
    };
    // Skip `#![enable(...)]` attributes before the root value.
    loop {
        sc.skip_ws();
        if sc.rest().starts_with(b"#!") {
            while sc.pos < sc.src.len() && sc.src[sc.pos] != b']' {
                sc.pos += 1;
            }
            sc.pos += 1;
        } else {
            break;
        }
    }
    let root_at = sc.pos;
    let root = sc.value(0);
    let mut node = &root;
    let mut at = root_at;
    for seg in path {
        // Descend through single-element tuples (newtype variants: `Family((...))`).
        while let Node::Seq(items) = node {
            if items.len() == 1 && matches!(seg, Seg::Field(_)) {
                node = &items[0].1;
            } else {
                break;
            }
        }
        match (seg, node) {
            (Seg::Field(name), Node::Struct(fields)) => {
                let (_, off, n) = fields.iter().find(|(f, _, _)| f == name)?;
                at = *off;
                node = n;
            }
            (Seg::Index(i), Node::Seq(items)) | (Seg::Index(i), Node::Map(items)) => {
                let (off, n) = items.get(*i)?;
                at = *off;
                node = n;
            }
            _ => return None,
        }
    }
    Some(at)
}

/// Offset of the value (not the name) of the field at `path`: the first non-blank byte
/// after the field's colon. Falls back to the name's offset.
pub fn locate_value(src: &str, path: &[Seg<'_>]) -> Option<usize> {
    let at = locate(src, path)?;
    if !matches!(path.last(), Some(Seg::Field(_))) {
        return Some(at);
    }
    let bytes = src.as_bytes();
    let mut i = at;
    while i < bytes.len() && bytes[i] != b':' {
        i += 1;
    }
    i += 1;
    while i < bytes.len() && bytes[i].is_ascii_whitespace() {
        i += 1;
    }
    Some(if i < bytes.len() { i } else { at })
}

/// The byte range `[start, end)` of the value at `path` (the text after the field's
/// colon, or the list item), if found.
pub fn value_span(src: &str, path: &[Seg<'_>]) -> Option<(usize, usize)> {
    let start = locate_value(src, path)?;
    let mut sc = Scanner {
        src: src.as_bytes(),
        pos: start,
    };
    sc.value(0);
    Some((start, sc.pos.min(src.len())))
}

/// 1-based line and column (in characters) of byte offset `at`.
pub fn line_col(src: &str, at: usize) -> (usize, usize) {
    let at = at.min(src.len());
    let before = &src[..at];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = src[line_start..at].chars().count() + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = r##"// comment (with: parens)
(
    name: "x, y", /* block
    comment */
    family: Harvest((rate: [0.1, 0.2], view: (ahead: 5))),
    map: [
        "WWW",
        "W.W",
    ],
    legend: { 'W': Wall, ',': Floor },
    teams: [(name: "a", policy: "random"), (name: "b", policy: r#"x"#)],
)"##;

    fn lc(path: &[Seg<'_>]) -> (usize, usize) {
        line_col(SRC, locate(SRC, path).expect("found"))
    }

    #[test]
    fn finds_fields_items_and_entries() {
        assert_eq!(lc(&[Seg::Field("name")]), (3, 5));
        assert_eq!(lc(&[Seg::Field("family"), Seg::Field("rate")]), (5, 22));
        assert_eq!(
            lc(&[
                Seg::Field("family"),
                Seg::Field("view"),
                Seg::Field("ahead")
            ]),
            (5, 47)
        );
        assert_eq!(lc(&[Seg::Field("map"), Seg::Index(1)]), (8, 9));
        assert_eq!(lc(&[Seg::Field("legend"), Seg::Index(1)]), (10, 26));
        assert_eq!(
            lc(&[Seg::Field("teams"), Seg::Index(1), Seg::Field("policy")]),
            (11, 56)
        );
        assert!(locate(SRC, &[Seg::Field("missing")]).is_none());
        let v = locate_value(
            SRC,
            &[Seg::Field("teams"), Seg::Index(0), Seg::Field("policy")],
        );
        assert_eq!(line_col(SRC, v.unwrap()), (11, 33));
    }

    #[test]
    fn survives_garbage() {
        for src in [
            "",
            "(",
            "((((",
            "[}",
            "(a: ",
            "\"unterminated",
            "(a: r#\"x",
            "/* open",
        ] {
            let _ = locate(src, &[Seg::Field("a"), Seg::Index(3)]);
        }
    }
}
