//! JSON for expressions: decoding only the fields a plan reads (every value
//! is still validated whole) and writing values the way Kafka's
//! `JsonSerializer` (Jackson's `ObjectMapper.writeValueAsBytes`) does.
//!
//! Decoding: integers that fit a Java `long` are ints, other numbers doubles;
//! an integer beyond 64 bits keeps its digits (and computes as a double); strings
//! are borrowed from the input unless they hold escapes; a field whose value
//! is an object or array is kept as its JSON text. A repeated key counts once,
//! with its last value (as Jackson's tree and Python's `json` do). `NaN` and
//! `Infinity` literals are not JSON and are rejected (as Jackson does by
//! default; Python's `json` accepts them).
//!
//! Writing (Jackson's defaults): compact, fields in order; non-ASCII written
//! as UTF-8 but for characters beyond the BMP (emoji), which Jackson writes
//! as two `\uXXXX` surrogates; `"` `\` and the control characters escaped,
//! `\b \t \n \f \r` in short form and the others as `\u00XX` with upper-case
//! hex; integers in decimal (beyond 64 bits too, when passed through); doubles as Java's `Double.toString` (`1.0E10`, `0.001`); NaN and
//! the infinities as the strings `"NaN"`, `"Infinity"`, `"-Infinity"`.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::Value;
use super::number::java_double;

/// The fields a plan reads, as a tree of path segments; each path has a slot.
#[derive(Debug, Clone, Default)]
pub struct FieldTree {
    root: Trie,
    paths: Vec<Vec<String>>,
}

#[derive(Debug, Clone, Default)]
struct Trie {
    children: Vec<(String, Trie)>,
    slot: Option<usize>,
    /// The slot is only copied into output JSON: its cell is the value's
    /// text ([`raw_cell`]), not decoded.
    raw: bool,
    /// This node's name in quotes, when it has nothing a JSON string
    /// escapes: then those bytes are that key (`Scanner::expected_key`).
    quoted: Option<Box<[u8]>>,
}

impl Trie {
    fn child(&self, name: &str) -> Option<&Trie> {
        self.child_bytes(name.as_bytes())
    }

    fn child_bytes(&self, name: &[u8]) -> Option<&Trie> {
        self.children
            .iter()
            .find(|(n, _)| n.as_bytes() == name)
            .map(|(_, t)| t)
    }

    /// Nulls every slot at or under this node (a repeated key starts over).
    fn clear(&self, row: &mut [Value<'_>]) {
        if let Some(slot) = self.slot {
            row[slot] = Value::Null;
        }
        for (_, child) in &self.children {
            child.clear(row);
        }
    }
}

impl FieldTree {
    /// The slot of `path`, added if new.
    pub fn slot(&mut self, path: &[String]) -> usize {
        let next = self.paths.len();
        let mut node = &mut self.root;
        for segment in path {
            let at = if let Some(at) = node.children.iter().position(|(n, _)| n == segment) {
                at
            } else {
                let plain = !segment.bytes().any(|c| c == b'"' || c == b'\\' || c < 0x20);
                let child = Trie {
                    quoted: plain.then(|| format!("\"{segment}\"").into_bytes().into()),
                    ..Trie::default()
                };
                node.children.push((segment.clone(), child));
                node.children.len() - 1
            };
            node = &mut node.children[at].1;
        }
        *node.slot.get_or_insert_with(|| {
            self.paths.push(path.to_vec());
            next
        })
    }

    /// Marks `slot` as only copied into output JSON: its cells are raw
    /// cells (`raw_cell`) of the value's text, whose writing is a copy when
    /// the text is already in the writer's form.
    pub fn set_raw(&mut self, slot: usize) {
        let mut node = &mut self.root;
        for segment in &self.paths[slot] {
            node = node
                .children
                .iter_mut()
                .find_map(|(n, t)| (n == segment).then_some(t))
                .expect("a slot's path is in the tree");
        }
        node.raw = true;
    }

    pub fn len(&self) -> usize {
        self.paths.len()
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// The path of each slot.
    pub fn paths(&self) -> &[Vec<String>] {
        &self.paths
    }

    /// One column per slot from each JSON value (None: a null value, whose
    /// fields are null). A value that is not JSON gets null fields and is
    /// reported to `on_error` with the parser's message.
    pub fn decode<'a>(
        &self,
        values: &[Option<&'a [u8]>],
        mut on_error: impl FnMut(usize, String),
    ) -> Vec<Vec<Value<'a>>> {
        let mut columns: Vec<Vec<Value<'a>>> = (0..self.len())
            .map(|_| Vec::with_capacity(values.len()))
            .collect();
        let mut row: Vec<Value<'a>> = vec![Value::Null; self.len()];
        for (i, value) in values.iter().enumerate() {
            if let Some(bytes) = value
                && let Err(message) = self.decode_one(bytes, &mut row)
            {
                on_error(i, message);
                row.fill(Value::Null);
            }
            for (column, cell) in columns.iter_mut().zip(row.iter_mut()) {
                column.push(std::mem::replace(cell, Value::Null));
            }
        }
        columns
    }

    /// The fields of one JSON value into `row` (one cell per slot, all null).
    pub fn decode_one<'a>(&self, bytes: &'a [u8], row: &mut [Value<'a>]) -> Result<(), String> {
        if self.root.slot.is_none() && scan_object(bytes, &self.root, row).is_some() {
            return Ok(());
        }
        // Not an object, or not one the scanner vouches for: serde_json
        // decides (and names what is wrong).
        row.fill(Value::Null);
        let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
        self.decode_serde(text, row)
    }

    /// `decode_one` by `serde_json` alone.
    fn decode_serde<'a>(&self, mut text: &'a str, row: &mut [Value<'a>]) -> Result<(), String> {
        if let Some(slot) = self.root.slot {
            // The value itself is read (the empty path): keep its text.
            let raw: &'a RawValue = serde_json::from_str(text).map_err(|e| e.to_string())?;
            text = raw.get();
            row[slot] = if self.root.raw {
                raw_cell(text)
            } else {
                leaf(text).map_err(|e| e.to_string())?
            };
            if self.root.children.is_empty() {
                return Ok(());
            }
        }
        let mut de = serde_json::Deserializer::from_str(text);
        ObjectSeed {
            trie: &self.root,
            row,
        }
        .deserialize(&mut de)
        .and_then(|()| de.end())
        .map_err(|e| e.to_string())
    }

    /// Whether each value is JSON: the message of each one that is not.
    pub fn validate(values: &[Option<&[u8]>]) -> Vec<(usize, String)> {
        let empty = FieldTree::default();
        let mut errors = Vec::new();
        empty.decode(values, |row, message| errors.push((row, message)));
        errors
    }
}

/// Puts `value` in `cell`. A cell is almost always null here (rows are
/// emptied after each value): then nothing is dropped, which spares a call
/// between making the value and storing it (it was built on the stack in
/// pieces and copied with wider loads, stalling).
#[inline]
fn set<'a>(cell: &mut Value<'a>, value: Value<'a>) {
    if !matches!(cell, Value::Null) {
        *cell = Value::Null;
    }
    // The cell is null, which owns nothing: not dropping it leaks nothing.
    std::mem::forget(std::mem::replace(cell, value));
}

/// The fields under `trie` of a JSON object into `row`, in one pass that
/// checks the whole text as `serde_json` does (UTF-8, objects, arrays,
/// strings with their escapes and no control characters, number syntax,
/// literals, nothing after the object) and materializes only the fields
/// read. None when the text is not such an object, or has what it leaves to
/// `serde_json` (a key with escapes, a field value `leaf` rejects): it never
/// accepts what `serde_json` rejects, and its cells are `serde_json`'s (`leaf`
/// of the same text).
///
/// UTF-8 is checked string by string, only for strings with non-ASCII bytes:
/// outside strings the scanner accepts ASCII alone, so the text is UTF-8
/// exactly when each of its strings is.
fn scan_object<'a>(bytes: &'a [u8], trie: &Trie, row: &mut [Value<'a>]) -> Option<()> {
    let mut s = Scanner {
        b: bytes,
        i: 0,
        stack: Vec::new(),
    };
    s.ws();
    s.object(trie, row)?;
    s.ws();
    (s.i == s.b.len()).then_some(())
}

/// Where the first of the 8 bytes in `x` (little-endian) that ends or
/// escapes a string's plain run is: `"`, `\`, a control character or a
/// non-ASCII byte; 8 when there is none. (Each test's lowest flagged byte is
/// a real match: a borrow only flags bytes above one.)
#[inline]
fn first_special(x: u64) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let quote = zero(x ^ (ONES * u64::from(b'"')));
    let backslash = zero(x ^ (ONES * u64::from(b'\\')));
    let control = x.wrapping_sub(ONES * 0x20) & !x & HIGH;
    ((quote | backslash | control | (x & HIGH)).trailing_zeros() / 8) as usize
}

/// How many of the 8 bytes in `x` (little-endian) are ASCII digits before
/// the first that is not. A byte is a digit when its high nibble is 3 and
/// stays 3 with 6 added (`0x3A`..`0x3F` carry into 4); an add carrying out
/// of a byte (from `0xFA` up, not a digit) only disturbs the bytes after it.
#[inline]
fn digit_run(x: u64) -> usize {
    const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    const THREES: u64 = 0x3030_3030_3030_3030;
    let not_digit =
        ((x & HIGH) ^ THREES) | ((x.wrapping_add(0x0606_0606_0606_0606) & HIGH) ^ THREES);
    (not_digit.trailing_zeros() / 8) as usize
}

/// Whether two slices of the same length hold the same bytes, compared a
/// word at a time inline (a key is a few bytes: `memcmp`'s call and set-up
/// cost more than the comparison).
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    debug_assert_eq!(a.len(), b.len());
    let n = a.len();
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("8 bytes"));
    let half = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().expect("4 bytes"));
    if n >= 8 {
        // Whole words, then the last word (overlapping the one before).
        (0..n / 8).all(|k| word(a, 8 * k) == word(b, 8 * k)) && word(a, n - 8) == word(b, n - 8)
    } else if n >= 4 {
        half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4)
    } else {
        a.iter().zip(b).all(|(x, y)| x == y)
    }
}

/// The value of an integer's JSON text (`-`? digits) if it fits an `i64`.
#[inline]
fn integer(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text {
        [b'-', digits @ ..] => (true, digits),
        digits => (false, digits),
    };
    // 19 digits cannot overflow a u64; longer ones are checked.
    let magnitude = if digits.len() <= 19 {
        digits
            .iter()
            .fold(0u64, |m, d| m * 10 + u64::from(d - b'0'))
    } else {
        digits.iter().try_fold(0u64, |m, d| {
            m.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })?
    };
    if negative {
        // Down to i64::MIN, whose magnitude is i64::MAX + 1.
        (magnitude <= i64::MIN.unsigned_abs()).then(|| 0i64.wrapping_sub_unsigned(magnitude))
    } else {
        i64::try_from(magnitude).ok()
    }
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
    /// The closing bytes of the containers `skip` is in.
    stack: Vec<u8>,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\t' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// The text from `start` to the scanner's position.
    fn text(&self, start: usize) -> &'a str {
        let bytes = &self.b[start..self.i];
        // SAFETY: the scanner has consumed these bytes, and it takes only
        // ASCII outside strings and checks every string with a non-ASCII
        // byte (`string`): they are UTF-8.
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }

    /// An object (at its `{`), keeping the fields under `trie`.
    fn object(&mut self, trie: &Trie, row: &mut [Value<'a>]) -> Option<()> {
        self.eat(b'{')?;
        self.ws();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        // Documents of a topic tend to have their keys in one order: the
        // child after the last one found is tried first.
        let mut hint = 0;
        loop {
            let found = if self.expected_key(trie, hint) {
                self.ws();
                self.eat(b':')?;
                Some(hint)
            } else {
                let (key, escaped) = self.key()?;
                if escaped {
                    return None;
                }
                trie.children.iter().position(|(n, _)| n.as_bytes() == key)
            };
            self.ws();
            if let Some(at) = found {
                hint = at + 1;
            }
            match found.map(|at| &trie.children[at].1) {
                None => self.skip()?,
                Some(child) => {
                    // A repeated key starts over: its last value counts (a
                    // leaf's cell is simply overwritten below).
                    if !child.children.is_empty() {
                        child.clear(row);
                    }
                    if !child.children.is_empty() && self.peek()? == b'{' {
                        let start = self.i;
                        self.object(child, row)?;
                        if let Some(slot) = child.slot {
                            set(
                                &mut row[slot],
                                Value::Json(Cow::Borrowed(self.text(start)), false),
                            );
                        }
                    } else if let Some(slot) = child.slot {
                        if child.raw {
                            let start = self.i;
                            let normalized = self.raw()?;
                            let text = Cow::Borrowed(self.text(start));
                            set(&mut row[slot], Value::Json(text, normalized));
                        } else {
                            self.cell(&mut row[slot])?;
                        }
                    } else {
                        self.skip()?;
                    }
                }
            }
            self.ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.ws();
                }
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Whether the text at the scanner is child `at`'s name in quotes (then
    /// skipped): a key read with one comparison, not scanned as a string.
    fn expected_key(&mut self, trie: &Trie, at: usize) -> bool {
        let Some(quoted) = trie.children.get(at).and_then(|(_, c)| c.quoted.as_deref()) else {
            return false;
        };
        let matched = self
            .b
            .get(self.i..self.i + quoted.len())
            .is_some_and(|text| same_bytes(text, quoted));
        if matched {
            self.i += quoted.len();
        }
        matched
    }

    /// A key (at its quote) and the colon after it: its raw bytes, and
    /// whether it has escapes.
    fn key(&mut self) -> Option<(&'a [u8], bool)> {
        self.eat(b'"')?;
        let start = self.i;
        let escaped = self.string()?;
        let key = &self.b[start..self.i - 1];
        self.ws();
        self.eat(b':')?;
        Some((key, escaped))
    }

    /// A value (at its first byte) into `out` as a cell: `leaf` of its
    /// text, read as it is scanned (and written in place, not returned: a
    /// returned cell went through the stack in pieces).
    fn cell(&mut self, out: &mut Value<'a>) -> Option<()> {
        let start = self.i;
        let cell = match self.peek()? {
            b'"' => {
                self.i += 1;
                if self.string()? {
                    Value::Str(Cow::Owned(serde_json::from_str(self.text(start)).ok()?))
                } else {
                    let text = self.text(start);
                    Value::Str(Cow::Borrowed(&text[1..text.len() - 1]))
                }
            }
            b'{' | b'[' => {
                self.skip()?;
                Value::Json(Cow::Borrowed(self.text(start)), false)
            }
            b't' => {
                self.literal(b"true")?;
                Value::Bool(true)
            }
            b'f' => {
                self.literal(b"false")?;
                Value::Bool(false)
            }
            b'n' => {
                self.literal(b"null")?;
                Value::Null
            }
            _ => {
                if self.number()? {
                    Value::Float(self.text(start).parse::<f64>().ok()?)
                } else if let Some(i) = integer(&self.b[start..self.i]) {
                    Value::Int(i)
                } else {
                    Value::BigInt(Cow::Borrowed(self.text(start)))
                }
            }
        };
        set(out, cell);
        Some(())
    }

    /// A value (at its first byte), checked and skipped; whether its text is
    /// in the writer's form, as [`raw_cell`] decides (without a second pass).
    fn raw(&mut self) -> Option<bool> {
        let start = self.i;
        match self.peek()? {
            b'"' => {
                self.i += 1;
                let (escaped, astral) = self.string_flags()?;
                Some(!escaped && !astral)
            }
            b't' | b'f' | b'n' => {
                self.skip()?;
                Some(true)
            }
            b'{' | b'[' => {
                self.skip()?;
                Some(false)
            }
            _ => Some(!self.number()? && !self.b[start..].starts_with(b"-0")),
        }
    }

    /// The rest of a string after its opening quote; whether it has escapes.
    /// Non-ASCII content must be UTF-8.
    fn string(&mut self) -> Option<bool> {
        self.string_flags().map(|(escaped, _)| escaped)
    }

    /// `string`, and whether the string has a character beyond the BMP
    /// (a byte from 0xF0 up: a 4-byte sequence's lead).
    fn string_flags(&mut self) -> Option<(bool, bool)> {
        let start = self.i;
        let mut escaped = false;
        let mut non_ascii = false;
        let mut astral = false;
        loop {
            // Plain runs eight bytes at a time.
            while let Some(chunk) = self.b.get(self.i..self.i + 8) {
                let plain = first_special(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
                self.i += plain;
                if plain < 8 {
                    break;
                }
            }
            let c = *self.b.get(self.i)?;
            self.i += 1;
            match c {
                b'"' => {
                    let content = &self.b[start..self.i - 1];
                    return (!non_ascii || std::str::from_utf8(content).is_ok())
                        .then_some((escaped, astral));
                }
                b'\\' => {
                    escaped = true;
                    match *self.b.get(self.i)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 1,
                        b'u' => {
                            // Any code unit, as serde_json takes a string it skips.
                            let hex = self.b.get(self.i + 1..self.i + 5)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.i += 5;
                        }
                        _ => return None,
                    }
                }
                0..=0x1F => return None,
                0x80.. => {
                    non_ascii = true;
                    astral |= c >= 0xF0;
                }
                _ => {}
            }
        }
    }

    /// A run of at least one digit.
    fn digits(&mut self) -> Option<()> {
        let start = self.i;
        // Eight bytes at a time while there are eight to read.
        while let Some(chunk) = self.b.get(self.i..self.i + 8) {
            let run = digit_run(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
            self.i += run;
            if run < 8 {
                return (self.i > start).then_some(());
            }
        }
        self.i += self.b[self.i..]
            .iter()
            .take_while(|d| d.is_ascii_digit())
            .count();
        (self.i > start).then_some(())
    }

    /// A number; whether it has a fraction or an exponent.
    fn number(&mut self) -> Option<bool> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.digits()?,
            _ => return None,
        }
        let mut float = false;
        if self.peek() == Some(b'.') {
            self.i += 1;
            self.digits()?;
            float = true;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            self.digits()?;
            float = true;
        }
        Some(float)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        (self.b.get(self.i..self.i + word.len())? == word).then(|| self.i += word.len())
    }

    /// One value (after any whitespace), checked and skipped; containers
    /// are tracked on a stack, so any depth is fine (as in `serde_json`).
    fn skip(&mut self) -> Option<()> {
        self.stack.clear();
        loop {
            self.ws();
            match self.peek()? {
                open @ (b'{' | b'[') => {
                    self.i += 1;
                    self.ws();
                    let close = if open == b'{' { b'}' } else { b']' };
                    if self.eat(close).is_none() {
                        self.stack.push(close);
                        if open == b'{' {
                            self.key()?;
                        }
                        continue;
                    }
                }
                b'"' => {
                    self.i += 1;
                    self.string()?;
                }
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                _ => {
                    self.number()?;
                }
            }
            // After a value: close what ends here, then the next element.
            loop {
                let Some(&close) = self.stack.last() else {
                    return Some(());
                };
                self.ws();
                match self.peek()? {
                    b',' => {
                        self.i += 1;
                        if close == b'}' {
                            self.ws();
                            self.key()?;
                        }
                        break;
                    }
                    c if c == close => {
                        self.i += 1;
                        self.stack.pop();
                    }
                    _ => return None,
                }
            }
        }
    }
}

/// A value's text as a cell (the text is valid JSON).
fn leaf(text: &str) -> Result<Value<'_>, serde_json::Error> {
    Ok(match text.as_bytes()[0] {
        b'{' | b'[' => Value::Json(Cow::Borrowed(text), false),
        b'n' => Value::Null,
        b't' => Value::Bool(true),
        b'f' => Value::Bool(false),
        b'"' if !text.contains('\\') => Value::Str(Cow::Borrowed(&text[1..text.len() - 1])),
        b'"' => Value::Str(Cow::Owned(serde_json::from_str::<String>(text)?)),
        _ if text.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) => {
            Value::Float(text.parse::<f64>().map_err(de::Error::custom)?)
        }
        _ => match text.parse::<i64>() {
            Ok(i) => Value::Int(i),
            Err(_) => Value::BigInt(Cow::Borrowed(text)),
        },
    })
}

/// A copied field's cell: its text (valid JSON), marked normalized when
/// [`write_value`] would write it as it is, so writing it is a copy. That
/// is: a string with no escape and no character beyond the BMP (which
/// Jackson writes as surrogate escapes), an integer but `-0`, a literal.
/// Other texts (floats, `-0`, escaped strings, objects, arrays) are
/// rewritten in the writer's form when written.
fn raw_cell(text: &str) -> Value<'_> {
    let b = text.as_bytes();
    let normalized = match b[0] {
        b'"' => !b.iter().any(|&c| c == b'\\' || c >= 0xF0),
        b'{' | b'[' => false,
        b't' | b'f' | b'n' => true,
        _ => !text.starts_with("-0") && !b.iter().any(|&c| matches!(c, b'.' | b'e' | b'E')),
    };
    Value::Json(Cow::Borrowed(text), normalized)
}

/// Walks an object, keeping the fields under `trie` and skipping the rest.
struct ObjectSeed<'t, 'r, 'a> {
    trie: &'t Trie,
    row: &'r mut [Value<'a>],
}

impl<'de> DeserializeSeed<'de> for ObjectSeed<'_, '_, 'de> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ObjectSeed<'_, '_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let ObjectSeed { trie, row } = self;
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let Some(child) = trie.child(&key) else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            child.clear(row);
            match child.slot {
                None => map.next_value_seed(ObjectSeed {
                    trie: child,
                    row: &mut *row,
                })?,
                Some(slot) => {
                    let raw: &'de RawValue = map.next_value()?;
                    let text = raw.get();
                    row[slot] = if child.raw {
                        raw_cell(text)
                    } else {
                        leaf(text).map_err(de::Error::custom)?
                    };
                    if !child.children.is_empty() && text.starts_with('{') {
                        // Both `a` and `a.b` are read: walk `a`'s text again.
                        let mut inner = serde_json::Deserializer::from_str(text);
                        ObjectSeed {
                            trie: child,
                            row: &mut *row,
                        }
                        .deserialize(&mut inner)
                        .map_err(de::Error::custom)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }

    // Not an object: no field is there.
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

/// An object key, borrowed from the input where it has no escapes.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
}

// --- writing -----------------------------------------------------------------

/// Where JSON text is written: a `String`, or the byte buffer of a log
/// frame being built (so a record's value is written where it is framed, not
/// copied there).
pub trait JsonOut {
    fn put(&mut self, s: &str);
    /// An ASCII byte.
    fn put_ascii(&mut self, b: u8);
}

impl JsonOut for String {
    #[inline]
    fn put(&mut self, s: &str) {
        self.push_str(s);
    }
    #[inline]
    fn put_ascii(&mut self, b: u8) {
        debug_assert!(b.is_ascii());
        self.push(char::from(b));
    }
}

impl JsonOut for Vec<u8> {
    #[inline]
    fn put(&mut self, s: &str) {
        crate::bytes::extend_small(self, s.as_bytes());
    }
    #[inline]
    fn put_ascii(&mut self, b: u8) {
        self.push(b);
    }
}

/// Writes `v` as Jackson writes the same value.
pub fn write_value<O: JsonOut + ?Sized>(out: &mut O, v: &Value<'_>) {
    match v {
        Value::Null => out.put("null"),
        Value::Bool(b) => out.put(if *b { "true" } else { "false" }),
        Value::Int(i) => out.put(itoa::Buffer::new().format(*i)),
        Value::BigInt(digits) => out.put(digits),
        Value::Float(f) => write_double(out, *f),
        Value::Str(s) => write_str(out, s),
        Value::Json(text, true) => out.put(text),
        Value::Json(text, false) => transcode(out, text),
    }
}

/// An object with these members, in order.
pub fn write_object<'v, 'a: 'v, O: JsonOut + ?Sized>(
    out: &mut O,
    members: impl Iterator<Item = (&'v str, &'v Value<'a>)>,
) {
    out.put_ascii(b'{');
    for (i, (name, value)) in members.enumerate() {
        if i > 0 {
            out.put_ascii(b',');
        }
        write_str(out, name);
        out.put_ascii(b':');
        write_value(out, value);
    }
    out.put_ascii(b'}');
}

/// Jackson writes a non-finite double as a string (`WRITE_NAN_AS_STRINGS`).
pub fn write_double<O: JsonOut + ?Sized>(out: &mut O, f: f64) {
    if f.is_finite() {
        out.put(&java_double(f));
    } else {
        out.put_ascii(b'"');
        out.put(&java_double(f));
        out.put_ascii(b'"');
    }
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// A JSON string with Jackson's escapes: also a character beyond the Basic
/// Multilingual Plane (an emoji), which Jackson's UTF-8 writer puts out as
/// its two UTF-16 surrogates, `\uD83D\uDE00`.
pub fn write_str<O: JsonOut + ?Sized>(out: &mut O, s: &str) {
    out.put_ascii(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        // Most bytes need nothing: skip them in a tight loop.
        if !NEEDS_ESCAPE[usize::from(bytes[i])] {
            i += 1;
            continue;
        }
        out.put(&s[start..i]);
        let b = bytes[i];
        let short = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0C => "\\f",
            _ => "",
        };
        if !short.is_empty() {
            out.put(short);
            i += 1;
        } else if b < 0x20 {
            push_u(out, u16::from(b));
            i += 1;
        } else {
            let c = s[i..].chars().next().expect("a char starts here");
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                push_u(out, *unit);
            }
            i += c.len_utf8();
        }
        start = i;
    }
    out.put(&s[start..]);
    out.put_ascii(b'"');
}

/// The bytes `write_str` does not copy as they are: `"`, `\`, the control
/// characters, and the lead bytes of 4-byte UTF-8 sequences.
const NEEDS_ESCAPE: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = b < 0x20 || b == b'"' as usize || b == b'\\' as usize || b >= 0xF0;
        b += 1;
    }
    table
};

fn push_u<O: JsonOut + ?Sized>(out: &mut O, unit: u16) {
    out.put("\\u");
    for shift in [12, 8, 4, 0] {
        out.put_ascii(HEX[usize::from((unit >> shift) & 0xF)]);
    }
}

/// Rewrites valid JSON text in the writer's form: whitespace dropped,
/// strings re-escaped, integers as written (`-0` as `0`; beyond 64 bits
/// the digits as they are, as Jackson's `BigInteger` nodes), other numbers
/// as Java doubles.
fn transcode<O: JsonOut + ?Sized>(out: &mut O, text: &str) {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b' ' | b'\t' | b'\n' | b'\r' => i += 1,
            c @ (b'{' | b'}' | b'[' | b']' | b':' | b',') => {
                out.put_ascii(c);
                i += 1;
            }
            b'"' => {
                let mut end = i + 1;
                let mut escaped = false;
                while b[end] != b'"' {
                    if b[end] == b'\\' {
                        escaped = true;
                        end += 1;
                    }
                    end += 1;
                }
                end += 1;
                if escaped {
                    let s: String =
                        serde_json::from_str(&text[i..end]).expect("validated when it was read");
                    write_str(out, &s);
                } else {
                    write_str(out, &text[i + 1..end - 1]);
                }
                i = end;
            }
            b't' => {
                out.put("true");
                i += 4;
            }
            b'f' => {
                out.put("false");
                i += 5;
            }
            b'n' => {
                out.put("null");
                i += 4;
            }
            _ => {
                let start = i;
                while i < b.len() && matches!(b[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    i += 1;
                }
                write_number(out, &text[start..i]);
            }
        }
    }
}

fn write_number<O: JsonOut + ?Sized>(out: &mut O, number: &str) {
    if number.contains(['.', 'e', 'E']) {
        write_double(out, number.parse().expect("validated when it was read"));
    } else if let Ok(i) = number.parse::<i64>() {
        out.put(itoa::Buffer::new().format(i));
    } else {
        out.put(number);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(paths: &[&str]) -> FieldTree {
        let mut t = FieldTree::default();
        for p in paths {
            let path: Vec<String> = p.split('.').map(str::to_owned).collect();
            t.slot(&path);
        }
        t
    }

    #[test]
    fn decodes_only_named_fields() {
        let t = tree(&["a", "b.c", "s", "o", "x"]);
        let doc = br#"{"a":1,"z":[1,{"q":2}],"b":{"c":2.5,"d":true},"s":"h\u00e9","o":{"k":[1]}}"#;
        let cols = t.decode(&[Some(doc), None], |_, m| panic!("{m}"));
        assert_eq!(cols[0], vec![Value::Int(1), Value::Null]);
        assert_eq!(cols[1][0], Value::Float(2.5));
        assert_eq!(cols[2][0], Value::Str(Cow::Borrowed("hé")));
        assert_eq!(
            cols[3][0],
            Value::Json(Cow::Borrowed(r#"{"k":[1]}"#), false)
        );
        assert_eq!(cols[4][0], Value::Null);
    }

    #[test]
    fn the_value_itself() {
        let mut t2 = FieldTree::default();
        t2.slot(&[]);
        let docs: [&[u8]; 3] = [br#" {"a":1} "#, br#""x""#, b"12"];
        let values: Vec<Option<&[u8]>> = docs.iter().map(|d| Some(*d)).collect();
        let cols = t2.decode(&values, |_, m| panic!("{m}"));
        assert!(matches!(&cols[0][0], Value::Json(text, false) if text.as_ref() == r#"{"a":1}"#));
        assert_eq!(cols[0][1], Value::Str(Cow::Borrowed("x")));
        assert_eq!(cols[0][2], Value::Int(12));
        t2.slot(&["a".to_owned()]);
        let cols = t2.decode(&values, |_, m| panic!("{m}"));
        assert_eq!(cols[1], vec![Value::Int(1), Value::Null, Value::Null]);
        assert_eq!(
            FieldTree::validate(&[Some(b"{}"), Some(b"{"), None]).len(),
            1
        );
    }

    /// `tree` with every slot copied rather than decoded.
    fn raw_tree(paths: &[&str]) -> FieldTree {
        let mut t = tree(paths);
        for slot in 0..t.len() {
            t.set_raw(slot);
        }
        t
    }

    /// The scanner and `serde_json` agree on what is JSON and on every cell
    /// (decoded, and copied).
    #[test]
    fn the_scanner_agrees_with_serde_json() {
        let paths = ["a", "b.c", "b", "s", "d.e.f"];
        for t in [tree(&paths), raw_tree(&paths)] {
            scanner_agrees_with_serde_json(&t);
        }
    }

    fn scanner_agrees_with_serde_json(t: &FieldTree) {
        let docs = [
            r#"{"a":1,"b":{"c":[1,{"x":"}"}],"z":null},"s":"x\"y"}"#,
            r#" { "a" : -0.5e+3 , "s" : "\u00e9\ud83d\ude00" , "q" : [ [ ] , { } , "\ud800" ] } "#,
            r#"{"d":{"e":{"f":true,"g":false}},"d":{"e":5}}"#,
            r#"{"a":{"a":1},"b":7,"b":{"c":"v"}}"#,
            r#"{"a":18446744073709551616,"k":"\/\b\f\n\r\t"}"#,
            r#"{"s":"\ud800"}"#,
            r#"{"a":-9223372036854775808,"b":{"c":9223372036854775807}}"#,
            r#"{"a":-9223372036854775809,"s":"x"}"#,
            r#"{"a":99999999999999999999999,"s":-0}"#,
            r#"{"b":{"c":1},"b":{"d":2}}"#,
            r#"{"s\u0061":1,"a":2}"#,
            "{}",
            "{\"a\":\"\u{7f}é😀\"}",
            "[1,2]",
            r#""str""#,
            "12",
            r#"{"a":1,}"#,
            r#"{"a":[1,]}"#,
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":.5}"#,
            r#"{"a":1e}"#,
            r#"{"a":+1}"#,
            r#"{"a":-}"#,
            r#"{"a":tru}"#,
            r#"{"a":nulll}"#,
            r#"{"a":"\x"}"#,
            r#"{"a":"\u12g4"}"#,
            "{\"a\":\"\u{1}\"}",
            "{\"z\":[\"\t\"]}",
            r#"{"a":1}}"#,
            r#"{"a":1} x"#,
            r#"{"a" 1}"#,
            "{a:1}",
            r#"{"a":1 "b":2}"#,
            r#"{"z":{"y":[}]}}"#,
            r#"{"z":[{"y":1,}]}"#,
            r#"{"z":[1 2]}"#,
            "{",
            "",
            r#"{"a":NaN}"#,
            r#"{"a":Infinity}"#,
            // Keys out of the tree's order, repeated, near misses, and a key
            // found by its quoted name but not followed by a colon.
            r#"{"s":"x","d":{"e":{"f":1}},"b":{"c":2},"a":3,"a":4}"#,
            r#"{"ab":1,"a":2,"":3,"b":{"cc":1,"c":5}}"#,
            r#"{"a" :1,"b" : {"c"	:	2}}"#,
            r#"{"a" 1}"#,
            r#"{"a"}"#,
            r#"{"a""#,
            r#"{"a"#,
            r#"{"b":{"c""#,
        ];
        let deep = format!("{{\"z\":{}1{}}}", "[".repeat(5000), "]".repeat(5000));
        let mut checked = docs.map(str::to_owned).to_vec();
        checked.push(deep);
        for doc in &checked {
            let mut fast = vec![Value::Null; t.len()];
            let mut slow = vec![Value::Null; t.len()];
            let fast_result = t.decode_one(doc.as_bytes(), &mut fast);
            let slow_result = t.decode_serde(doc, &mut slow);
            assert_eq!(
                fast_result.is_ok(),
                slow_result.is_ok(),
                "{doc}: {slow_result:?}"
            );
            assert_eq!(fast_result, slow_result, "{doc}");
            assert_eq!(fast, slow, "{doc}");
        }
        // The scanner itself takes the ordinary documents.
        let mut row = vec![Value::Null; t.len()];
        assert!(scan_object(checked[0].as_bytes(), &t.root, &mut row).is_some());
        assert!(scan_object(checked[1].as_bytes(), &t.root, &mut row).is_some());
    }

    /// A copied cell is written as the decoded cell is, and as it is read
    /// when marked normalized: integers but `-0`, strings without escapes
    /// or characters beyond the BMP, literals.
    #[test]
    fn copied_cells_are_written_as_decoded_ones() {
        let texts = [
            ("0", true),
            ("-12", true),
            ("1700000000000", true),
            ("-9223372036854775808", true),
            ("123456789012345678901234", true),
            ("-9223372036854775809", true),
            ("-0", false),
            ("1.0e2", false),
            ("1e2", false),
            ("1E-7", false),
            ("1.5", false),
            ("-0.0", false),
            ("1e400", false),
            (r#""abc""#, true),
            (r#""""#, true),
            ("\"d\u{e9}j\u{e0} \u{7ff}\u{ffff}\"", true),
            ("\"\u{1F600}\"", false),
            (r#""\u0041""#, false),
            (r#""\/""#, false),
            (r#""\ud83d\ude00""#, false),
            (r#""\"\\\n""#, false),
            ("true", true),
            ("false", true),
            ("null", true),
            (r#"{ "a" : 1 }"#, false),
            ("[1, 2.0]", false),
            ("[]", false),
            ("{}", false),
        ];
        for (text, normalized) in texts {
            let copied = raw_cell(text);
            assert!(
                matches!(copied, Value::Json(_, n) if n == normalized),
                "{text}: {copied:?}"
            );
            let mut from_copy = String::new();
            write_value(&mut from_copy, &copied);
            let mut from_cell = String::new();
            write_value(&mut from_cell, &leaf(text).unwrap());
            assert_eq!(from_copy, from_cell, "{text}");
            if normalized {
                assert_eq!(from_copy, text);
            }
        }
    }

    /// UTF-8 is checked in strings only, and long strings are scanned in
    /// chunks: both still agree with `from_utf8` + `serde_json` byte for byte.
    #[test]
    fn the_scanner_checks_utf8_and_long_strings() {
        for t in [tree(&["a", "s"]), raw_tree(&["a", "s"])] {
            scanner_checks_utf8_and_long_strings(&t);
        }
    }

    fn scanner_checks_utf8_and_long_strings(t: &FieldTree) {
        let long = "abcdefghijklmnopqrstuvwxyz0123456789";
        let mut docs: Vec<Vec<u8>> = vec![
            b"{\"a\":\"ok\xff\"}".to_vec(),
            b"{\"z\":\"\xc3\",\"a\":1}".to_vec(),
            b"{\"\xe9\":1,\"a\":2}".to_vec(),
            b"{\"a\":[\"\xed\xa0\x80\"]}".to_vec(),
            "{\"a\":\"d\u{e9}j\u{e0} vu \u{1F600} \u{7ff}\"}"
                .as_bytes()
                .to_vec(),
        ];
        // A quote, backslash, control or non-ASCII byte at each position of
        // a long string, in a read field and in a skipped one.
        for special in ["\\\"", "\\n", "\u{1}", "\u{e9}", "\u{ff}"] {
            for at in 0..=long.len() {
                let text = format!("{}{special}{}", &long[..at], &long[at..]);
                docs.push(format!("{{\"s\":\"{text}\",\"z\":\"{text}\"}}").into_bytes());
            }
        }
        let mut cut = "{\"s\":\"\u{e9}".as_bytes().to_vec();
        cut.pop();
        cut.extend_from_slice(b"abcdefgh\"}");
        docs.push(cut);
        for doc in &docs {
            let mut fast = vec![Value::Null; t.len()];
            let mut slow = vec![Value::Null; t.len()];
            let fast_result = t.decode_one(doc, &mut fast);
            let slow_result = std::str::from_utf8(doc)
                .map_err(|e| format!("not UTF-8: {e}"))
                .and_then(|text| t.decode_serde(text, &mut slow));
            let shown = String::from_utf8_lossy(doc);
            assert_eq!(fast_result, slow_result, "{shown}");
            assert_eq!(fast, slow, "{shown}");
        }
    }

    /// Every byte value in every place of a word: the run of digits found
    /// is the one a byte-at-a-time count finds.
    #[test]
    fn digit_runs_are_counted_exactly() {
        let words = (0..=255u8).flat_map(|b| {
            (0..8).flat_map(move |at| {
                [b'7', 0xFF, b'0', b'9', 0x00].map(move |fill| {
                    let mut w = [b'5'; 8];
                    w[at] = b;
                    w[(at + 3) % 8] = fill;
                    w
                })
            })
        });
        for w in words {
            let expected = w.iter().take_while(|d| d.is_ascii_digit()).count();
            assert_eq!(digit_run(u64::from_le_bytes(w)), expected, "{w:?}");
        }
    }

    #[test]
    fn same_bytes_compares_every_byte() {
        for n in 0..=24 {
            let a: Vec<u8> = (0..n as u8).map(|i| b'a' + i).collect();
            assert!(same_bytes(&a, &a.clone()), "length {n}");
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x20;
                assert!(!same_bytes(&a, &b), "length {n}, differing at {at}");
            }
        }
    }

    #[test]
    fn parent_and_child_both_read() {
        let t = tree(&["a", "a.b"]);
        let cols = t.decode(&[Some(br#"{"a":{"b":7}}"#.as_slice())], |_, m| {
            panic!("{m}")
        });
        assert_eq!(cols[1][0], Value::Int(7));
        assert!(matches!(cols[0][0], Value::Json(..)));
    }

    #[test]
    fn last_repeated_key_wins() {
        let t = tree(&["a.b"]);
        let cols = t.decode(&[Some(br#"{"a":{"b":1},"a":5}"#.as_slice())], |_, m| {
            panic!("{m}")
        });
        assert_eq!(cols[0][0], Value::Null);
    }

    #[test]
    fn malformed_values_are_reported() {
        let t = tree(&["a"]);
        let mut bad = Vec::new();
        let inputs: [&[u8]; 5] = [
            b"{\"a\":1",
            b"{\"a\":1}x",
            b"\xff",
            b"{\"a\":NaN}",
            b"{\"z\":[1,}",
        ];
        let values: Vec<Option<&[u8]>> = inputs.iter().map(|v| Some(*v)).collect();
        let cols = t.decode(&values, |row, m| bad.push((row, m)));
        assert_eq!(
            bad.iter().map(|(r, _)| *r).collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 4]
        );
        assert!(cols[0].iter().all(|v| *v == Value::Null));
    }

    #[test]
    fn numbers() {
        let t = tree(&["i", "f", "big", "neg0"]);
        let cols = t.decode(
            &[Some(
                br#"{"i":-42,"f":1e2,"big":18446744073709551616,"neg0":-0.0}"#.as_slice(),
            )],
            |_, m| panic!("{m}"),
        );
        assert_eq!(cols[0][0], Value::Int(-42));
        assert_eq!(cols[1][0], Value::Float(100.0));
        // The edges of i64, where integers become big ones.
        let edges = tree(&["a", "b", "c", "d", "e"]);
        let doc = br#"{"a":9223372036854775807,"b":-9223372036854775808,"c":9223372036854775808,"d":-9223372036854775809,"e":-0}"#;
        let at_edges = edges.decode(&[Some(doc.as_slice())], |_, m| panic!("{m}"));
        assert_eq!(at_edges[0][0], Value::Int(i64::MAX));
        assert_eq!(at_edges[1][0], Value::Int(i64::MIN));
        assert_eq!(
            at_edges[2][0],
            Value::BigInt(Cow::Borrowed("9223372036854775808"))
        );
        assert_eq!(
            at_edges[3][0],
            Value::BigInt(Cow::Borrowed("-9223372036854775809"))
        );
        assert_eq!(at_edges[4][0], Value::Int(0));
        assert_eq!(
            cols[2][0],
            Value::BigInt(Cow::Borrowed("18446744073709551616"))
        );
        assert!(matches!(cols[3][0], Value::Float(f) if f == 0.0 && f.is_sign_negative()));
    }

    #[test]
    fn writes_as_jackson() {
        let mut out = String::new();
        write_object(
            &mut out,
            [
                (
                    "s",
                    &Value::Str(Cow::Borrowed("a\"\\\n\u{1}\u{1f}\u{1F600}é\u{7f}/")),
                ),
                ("f", &Value::Float(1e10)),
                ("n", &Value::Float(f64::NAN)),
                ("i", &Value::Int(i64::MIN)),
                (
                    "raw",
                    &Value::Json(
                        Cow::Borrowed(r#"{ "x" : [ 1e2 , "\u0041" , -0, 123456789012345678901234, 1e400 ] , "y":{} }"#),
                        false,
                    ),
                ),
                ("e", &Value::Json(Cow::Borrowed("[ ]"), false)),
            ]
            .into_iter(),
        );
        assert_eq!(
            out,
            r#"{"s":"a\"\\\n\u0001\u001F\uD83D\uDE00é/","f":1.0E10,"n":"NaN","i":-9223372036854775808,"raw":{"x":[100.0,"A",0,123456789012345678901234,"Infinity"],"y":{}},"e":[]}"#
        );
    }
}
