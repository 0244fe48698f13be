//! Column expressions: a tree compiled once into a [`Plan`], then evaluated
//! over a batch of JSON values with no per-record dispatch outside Rust.
//!
//! A plan reads only the fields its expression names ([`json::FieldTree`]),
//! evaluates each operator over a whole column, and either yields a column of
//! [`Value`]s or writes each row as JSON ([`json::write_value`]).
//!
//! Semantics (Python's where Python has one, SQL's for nulls):
//! - A missing field, a JSON `null` and a null record value are null. Every
//!   operator but `is_null`, `&` and `|` is null when an operand is null.
//! - Integers are Java `long`s: `+ - *` wrap on overflow as Java's do; `/` is
//!   true division (a float, as in Python); `//` and `%` floor as Python's do
//!   (the result of `%` has the divisor's sign); a division by zero is null
//!   (as in Spark SQL's non-ANSI mode), never an error.
//! - Any float operand makes the result a float. `str + str` concatenates.
//! - `==`/`!=` between values of different types are false/true (an int and a
//!   float compare by value); `< <= > >=` between them are an error. NaN is
//!   unordered, as in Python.
//! - `&`, `|`, `~` are Kleene's three-valued logic over booleans (SQL):
//!   `false & null` is false, `true | null` is true; other operands are an error.
//! - An error (an operator given types it does not take, a failed cast) fails
//!   that row only: its result is null and [`Evaluated::errors`] names it.

pub mod json;
pub mod number;
pub mod pipeline;

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt::Write as _;

pub use json::FieldTree;

/// One cell of a column.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Cow<'a, str>),
    /// An integer beyond a Java `long`, as its digits: written as they are
    /// (as Jackson's `BigInteger` nodes and Python's `int`), computed with as
    /// the nearest double.
    BigInt(Cow<'a, str>),
    /// A JSON object or array, as text; `normalized` once written by
    /// [`json::write_value`] (compact, Jackson's number and string forms).
    /// Also any JSON value's text for a field a plan only copies into a
    /// `struct` (never an operand), normalized when already in that form.
    Json(Cow<'a, str>, bool),
}

impl Value<'_> {
    /// Python's name of the value's type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::BigInt(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Json(text, _) => {
                if text.starts_with('[') {
                    "list"
                } else {
                    "dict"
                }
            }
        }
    }

    pub fn into_owned(self) -> Value<'static> {
        match self {
            Value::Null => Value::Null,
            Value::Bool(b) => Value::Bool(b),
            Value::Int(i) => Value::Int(i),
            Value::Float(f) => Value::Float(f),
            Value::Str(s) => Value::Str(Cow::Owned(s.into_owned())),
            Value::BigInt(s) => Value::BigInt(Cow::Owned(s.into_owned())),
            Value::Json(s, n) => Value::Json(Cow::Owned(s.into_owned()), n),
        }
    }
}

/// The types `cast` converts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    Int,
    Float,
    Str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnaryOp {
    Not,
    Neg,
    IsNull,
    Upper,
    Lower,
    Cast(Type),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    FloorDiv,
    Mod,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    StartsWith,
    Contains,
}

impl BinaryOp {
    fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::FloorDiv => "//",
            BinaryOp::Mod => "%",
            BinaryOp::Eq => "==",
            BinaryOp::Ne => "!=",
            BinaryOp::Lt => "<",
            BinaryOp::Le => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::Ge => ">=",
            BinaryOp::And => "&",
            BinaryOp::Or => "|",
            BinaryOp::StartsWith => "startswith",
            BinaryOp::Contains => "contains",
        }
    }
}

/// An expression as the user wrote it (field paths by name).
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A field of the value, by path (`["a", "b"]` for `a.b`).
    Col(Vec<String>),
    Lit(Value<'static>),
    Unary(UnaryOp, Box<Expr>),
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    /// A JSON object with these fields, in this order.
    Struct(Vec<(String, Expr)>),
}

/// An expression with its fields resolved to column slots.
#[derive(Debug, Clone)]
enum Node {
    Field(usize),
    Lit(Value<'static>),
    Unary(UnaryOp, Box<Node>),
    Binary(BinaryOp, Box<Node>, Box<Node>),
    Struct(Vec<(String, Node)>),
}

/// Why a row has no result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The value is not JSON (the deserialization exception handler's case).
    Malformed,
    /// An operator failed on this row (the processing exception handler's).
    Eval,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowError {
    pub row: usize,
    pub kind: ErrorKind,
    pub message: String,
}

/// A column: one value for every row, or per row.
#[derive(Debug, Clone)]
pub enum Column<'a> {
    Const(Value<'a>),
    Rows(Vec<Value<'a>>),
}

impl<'a> Column<'a> {
    pub fn get(&self, row: usize) -> &Value<'a> {
        match self {
            Column::Const(v) => v,
            Column::Rows(vs) => &vs[row],
        }
    }
}

/// The result of evaluating a plan over a batch.
#[derive(Debug)]
pub struct Evaluated<'a> {
    pub rows: usize,
    result: Outcome<'a>,
    /// At most one per row, in row order; those rows' results are null.
    pub errors: Vec<RowError>,
}

#[derive(Debug)]
enum Outcome<'a> {
    Column(Column<'a>),
    /// A `struct` at the root: its members' columns, written row by row
    /// straight into the output (no object is built per row).
    Struct(Vec<(&'a str, Column<'a>)>),
}

/// Rows written as JSON into one buffer.
#[derive(Debug, Default)]
pub struct JsonRows {
    pub text: String,
    /// Each row's range in `text`; None for a null result.
    pub spans: Vec<Option<(usize, usize)>>,
}

impl<'a> Evaluated<'a> {
    /// Rows whose result is `true` (a filter's survivors); nulls, `false` and
    /// failed rows are not.
    pub fn true_rows(&self) -> Vec<usize> {
        let Outcome::Column(column) = &self.result else {
            return Vec::new();
        };
        let mut failed = self.errors.iter().map(|e| e.row).peekable();
        (0..self.rows)
            .filter(|&i| {
                // errors are in row order
                while failed.next_if(|&row| row < i).is_some() {}
                failed.peek() != Some(&i) && matches!(column.get(i), Value::Bool(true))
            })
            .collect()
    }

    /// Row `row`'s result.
    pub fn value(&self, row: usize) -> Cow<'_, Value<'a>> {
        match &self.result {
            Outcome::Column(column) => Cow::Borrowed(column.get(row)),
            Outcome::Struct(members) => {
                let mut text = String::new();
                json::write_object(&mut text, members.iter().map(|(n, c)| (*n, c.get(row))));
                Cow::Owned(Value::Json(Cow::Owned(text), true))
            }
        }
    }

    /// Every row's result as JSON (as Jackson writes it).
    pub fn to_json(&self) -> JsonRows {
        let writer = self.writer();
        let mut out = JsonRows {
            text: String::with_capacity(64),
            spans: Vec::with_capacity(self.rows),
        };
        for row in 0..self.rows {
            let start = out.text.len();
            out.spans.push(
                writer
                    .write(row, &mut out.text)
                    .then_some((start, out.text.len())),
            );
            if row == 0 {
                // Room for the rest at about the first row's size, so the
                // text is not copied as it grows.
                let len = out.text.len();
                out.text.reserve((self.rows - 1) * (len + len / 8 + 8));
            }
        }
        out
    }

    /// Writes rows' results as JSON wherever the caller wants them.
    pub fn writer(&self) -> RowWriter<'_, 'a> {
        // A struct's member names, escaped once: `{"a":`, `,"b":`, …
        let heads = match &self.result {
            Outcome::Struct(members) => members
                .iter()
                .enumerate()
                .map(|(i, (name, _))| {
                    let mut head = String::from(if i == 0 { "{" } else { "," });
                    json::write_str(&mut head, name);
                    head.push(':');
                    head
                })
                .collect(),
            Outcome::Column(_) => Vec::new(),
        };
        RowWriter {
            result: &self.result,
            heads,
        }
    }
}

/// Writes an evaluation's rows as JSON (as Jackson writes them).
#[derive(Debug)]
pub struct RowWriter<'e, 'a> {
    result: &'e Outcome<'a>,
    /// A struct's member names with what precedes and follows them.
    heads: Vec<String>,
}

impl RowWriter<'_, '_> {
    /// Writes row `row`'s result to `out`; false (nothing written) for a
    /// null result.
    pub fn write<O: json::JsonOut + ?Sized>(&self, row: usize, out: &mut O) -> bool {
        match self.result {
            Outcome::Struct(members) => {
                if members.is_empty() {
                    out.put_ascii(b'{');
                }
                for (head, (_, column)) in self.heads.iter().zip(members) {
                    out.put(head);
                    json::write_value(out, column.get(row));
                }
                out.put_ascii(b'}');
                true
            }
            Outcome::Column(column) => match column.get(row) {
                Value::Null => false,
                v => {
                    json::write_value(out, v);
                    true
                }
            },
        }
    }
}

/// An expression compiled for evaluation: its fields and its operator tree.
#[derive(Debug, Clone)]
pub struct Plan {
    fields: FieldTree,
    /// How often the expression reads each slot (the last read takes the column).
    uses: Vec<usize>,
    root: Node,
}

impl Plan {
    pub fn compile(expr: &Expr) -> Plan {
        let mut fields = FieldTree::default();
        let root = resolve(expr, &mut fields);
        let mut uses = vec![0; fields.len()];
        count_uses(&root, &mut uses);
        let mut copies = vec![0; fields.len()];
        count_copies(&root, &mut copies);
        for (slot, (&used, &copied)) in uses.iter().zip(&copies).enumerate() {
            if used == copied {
                // Read only to be written out: its text is copied, not decoded.
                fields.set_raw(slot);
            }
        }
        Plan { fields, uses, root }
    }

    /// The fields the expression reads, in slot order.
    pub fn fields(&self) -> &FieldTree {
        &self.fields
    }

    /// Whether the result is a JSON object built by `struct`.
    pub fn is_struct(&self) -> bool {
        matches!(self.root, Node::Struct(_))
    }

    /// Decodes the fields from each JSON value (None: a null value) and
    /// evaluates the expression.
    pub fn eval_json<'a>(&'a self, values: &[Option<&'a [u8]>]) -> Evaluated<'a> {
        let mut errors = Errors::new(values.len());
        let columns = self.fields.decode(values, |row, message| {
            errors.fail(row, ErrorKind::Malformed, message);
        });
        self.eval_columns(columns, values.len(), errors)
    }

    /// Evaluates over columns already decoded (one per field slot);
    /// `failed` rows failed before (while their fields were read).
    pub fn eval<'a>(
        &'a self,
        columns: Vec<Vec<Value<'a>>>,
        rows: usize,
        failed: Vec<RowError>,
    ) -> Evaluated<'a> {
        let mut errors = Errors::new(rows);
        for e in failed {
            errors.fail(e.row, e.kind, e.message);
        }
        self.eval_columns(columns, rows, errors)
    }

    fn eval_columns<'a>(
        &'a self,
        columns: Vec<Vec<Value<'a>>>,
        rows: usize,
        mut errors: Errors,
    ) -> Evaluated<'a> {
        let mut columns: Vec<(Vec<Value<'a>>, usize)> = columns
            .into_iter()
            .zip(&self.uses)
            .map(|(c, &uses)| (c, uses))
            .collect();
        let result = match &self.root {
            Node::Struct(members) => Outcome::Struct(
                members
                    .iter()
                    .map(|(name, e)| (name.as_str(), eval_node(e, &mut columns, rows, &mut errors)))
                    .collect(),
            ),
            root => Outcome::Column(eval_node(root, &mut columns, rows, &mut errors)),
        };
        let mut errors = errors.list;
        errors.sort_by_key(|e| e.row);
        Evaluated {
            rows,
            result,
            errors,
        }
    }
}

fn count_uses(node: &Node, uses: &mut [usize]) {
    match node {
        Node::Field(slot) => uses[*slot] += 1,
        Node::Lit(_) => {}
        Node::Unary(_, e) => count_uses(e, uses),
        Node::Binary(_, a, b) => {
            count_uses(a, uses);
            count_uses(b, uses);
        }
        Node::Struct(members) => members.iter().for_each(|(_, e)| count_uses(e, uses)),
    }
}

/// How often each slot is a member of a `struct` as it is (`struct(a=col("a"))`).
fn count_copies(node: &Node, copies: &mut [usize]) {
    match node {
        Node::Field(_) | Node::Lit(_) => {}
        Node::Unary(_, e) => count_copies(e, copies),
        Node::Binary(_, a, b) => {
            count_copies(a, copies);
            count_copies(b, copies);
        }
        Node::Struct(members) => {
            for (_, e) in members {
                match e {
                    Node::Field(slot) => copies[*slot] += 1,
                    e => count_copies(e, copies),
                }
            }
        }
    }
}

fn resolve(expr: &Expr, fields: &mut FieldTree) -> Node {
    match expr {
        Expr::Col(path) => Node::Field(fields.slot(path)),
        Expr::Lit(v) => Node::Lit(v.clone()),
        Expr::Unary(op, e) => Node::Unary(*op, Box::new(resolve(e, fields))),
        Expr::Binary(op, a, b) => Node::Binary(
            *op,
            Box::new(resolve(a, fields)),
            Box::new(resolve(b, fields)),
        ),
        Expr::Struct(members) => Node::Struct(
            members
                .iter()
                .map(|(name, e)| (name.clone(), resolve(e, fields)))
                .collect(),
        ),
    }
}

/// The first error of each row.
struct Errors {
    failed: Vec<bool>,
    list: Vec<RowError>,
}

impl Errors {
    fn new(rows: usize) -> Self {
        Errors {
            failed: vec![false; rows],
            list: Vec::new(),
        }
    }

    fn fail(&mut self, row: usize, kind: ErrorKind, message: String) {
        if !self.failed[row] {
            self.failed[row] = true;
            self.list.push(RowError { row, kind, message });
        }
    }
}

fn eval_node<'a>(
    node: &Node,
    columns: &mut [(Vec<Value<'a>>, usize)],
    rows: usize,
    errors: &mut Errors,
) -> Column<'a> {
    match node {
        Node::Field(slot) => {
            let (values, uses) = &mut columns[*slot];
            *uses -= 1;
            if *uses == 0 {
                Column::Rows(std::mem::take(values))
            } else {
                Column::Rows(values.clone())
            }
        }
        Node::Lit(v) => Column::Const(v.clone()),
        Node::Unary(op, e) => match eval_node(e, columns, rows, errors) {
            Column::Const(v) => match unary(*op, v.clone()) {
                Ok(out) => Column::Const(out),
                Err(message) => {
                    for row in 0..rows {
                        errors.fail(row, ErrorKind::Eval, message.clone());
                    }
                    Column::Const(Value::Null)
                }
            },
            Column::Rows(values) => Column::Rows(
                values
                    .into_iter()
                    .enumerate()
                    .map(|(row, v)| {
                        unary(*op, v).unwrap_or_else(|message| {
                            errors.fail(row, ErrorKind::Eval, message);
                            Value::Null
                        })
                    })
                    .collect(),
            ),
        },
        Node::Binary(op, lhs, rhs) => {
            let left = eval_node(lhs, columns, rows, errors);
            let right = eval_node(rhs, columns, rows, errors);
            let mut apply = |row: usize, x: &Value<'a>, y: &Value<'a>| match binary(*op, x, y) {
                Ok(out) => out,
                Err(message) => {
                    errors.fail(row, ErrorKind::Eval, message);
                    Value::Null
                }
            };
            // The results overwrite an operand's own rows: no column is
            // allocated per operator (`price * 89 // 100` is two).
            match (left, right) {
                (Column::Const(x), Column::Const(y)) => match binary(*op, &x, &y) {
                    Ok(v) => Column::Const(v),
                    // A constant failure fails every row.
                    Err(_) => Column::Rows((0..rows).map(|row| apply(row, &x, &y)).collect()),
                },
                (Column::Rows(mut xs), Column::Const(y)) => {
                    for (row, x) in xs.iter_mut().enumerate() {
                        *x = apply(row, x, &y);
                    }
                    Column::Rows(xs)
                }
                (Column::Const(x), Column::Rows(mut ys)) => {
                    for (row, y) in ys.iter_mut().enumerate() {
                        *y = apply(row, &x, y);
                    }
                    Column::Rows(ys)
                }
                (Column::Rows(mut xs), Column::Rows(ys)) => {
                    for (row, (x, y)) in xs.iter_mut().zip(&ys).enumerate() {
                        *x = apply(row, x, y);
                    }
                    Column::Rows(xs)
                }
            }
        }
        Node::Struct(members) => {
            let values: Vec<(&str, Column<'a>)> = members
                .iter()
                .map(|(name, e)| (name.as_str(), eval_node(e, columns, rows, errors)))
                .collect();
            let out = (0..rows)
                .map(|row| {
                    let mut text = String::with_capacity(64);
                    json::write_object(&mut text, values.iter().map(|(n, c)| (*n, c.get(row))));
                    Value::Json(Cow::Owned(text), true)
                })
                .collect();
            Column::Rows(out)
        }
    }
}

/// A big integer as the double operators compute with.
fn as_double(v: Value<'_>) -> Value<'_> {
    match v {
        Value::BigInt(digits) => Value::Float(digits.parse().expect("JSON integer digits")),
        other => other,
    }
}

fn unary(op: UnaryOp, v: Value<'_>) -> Result<Value<'_>, String> {
    let v = match (op, v) {
        (UnaryOp::Cast(Type::Str), Value::BigInt(digits)) => return Ok(Value::Str(digits)),
        (_, v) => as_double(v),
    };
    if op == UnaryOp::IsNull {
        return Ok(Value::Bool(v == Value::Null));
    }
    if v == Value::Null {
        return Ok(Value::Null);
    }
    let bad = |v: &Value<'_>, what: &str| {
        Err(format!("bad operand type for {what}: '{}'", v.type_name()))
    };
    match op {
        UnaryOp::IsNull => unreachable!("handled above"),
        UnaryOp::Not => match v {
            Value::Bool(b) => Ok(Value::Bool(!b)),
            other => bad(&other, "~"),
        },
        UnaryOp::Neg => match v {
            Value::Int(i) => Ok(Value::Int(i.wrapping_neg())),
            Value::Float(f) => Ok(Value::Float(-f)),
            other => bad(&other, "unary -"),
        },
        UnaryOp::Upper | UnaryOp::Lower => match v {
            Value::Str(s) => Ok(Value::Str(Cow::Owned(if op == UnaryOp::Upper {
                s.to_uppercase()
            } else {
                s.to_lowercase()
            }))),
            other => bad(
                &other,
                if op == UnaryOp::Upper {
                    "upper()"
                } else {
                    "lower()"
                },
            ),
        },
        UnaryOp::Cast(to) => cast(v, to),
    }
}

fn cast(v: Value<'_>, to: Type) -> Result<Value<'_>, String> {
    let fail = |v: &Value<'_>, to: &str| {
        let shown = match v {
            Value::Str(s) => format!(" {s:?}"),
            Value::Float(f) => format!(" {}", number::python_float(*f)),
            _ => String::new(),
        };
        Err(format!("cannot cast {}{shown} to {to}", v.type_name()))
    };
    match (to, v) {
        (Type::Int, Value::Int(i)) => Ok(Value::Int(i)),
        (Type::Int | Type::Float, v @ Value::BigInt(_)) => cast(as_double(v), to),
        (Type::Int, Value::Bool(b)) => Ok(Value::Int(i64::from(b))),
        (Type::Int, Value::Float(f)) => {
            let t = f.trunc();
            // i64::MIN is exact as a double; i64::MAX + 1 is the first past it.
            if (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&t) {
                Ok(Value::Int(t as i64))
            } else {
                fail(&Value::Float(f), "int")
            }
        }
        (Type::Int, Value::Str(s)) => match s.trim().replace('_', "").parse::<i64>() {
            Ok(i) if !s.trim().starts_with('_') && !s.trim().ends_with('_') => Ok(Value::Int(i)),
            _ => fail(&Value::Str(s), "int"),
        },
        (Type::Float, Value::Int(i)) => Ok(Value::Float(i as f64)),
        (Type::Float, Value::Bool(b)) => Ok(Value::Float(if b { 1.0 } else { 0.0 })),
        (Type::Float, Value::Float(f)) => Ok(Value::Float(f)),
        (Type::Float, Value::Str(s)) => match s.trim().parse::<f64>() {
            Ok(f) => Ok(Value::Float(f)),
            Err(_) => fail(&Value::Str(s), "float"),
        },
        (Type::Str, Value::Int(i)) => Ok(Value::Str(Cow::Owned(i.to_string()))),
        (Type::Str, Value::Bool(b)) => {
            Ok(Value::Str(Cow::Borrowed(if b { "True" } else { "False" })))
        }
        (Type::Str, Value::Float(f)) => Ok(Value::Str(Cow::Owned(number::python_float(f)))),
        (Type::Str, Value::Str(s) | Value::BigInt(s)) => Ok(Value::Str(s)),
        (Type::Str, Value::Json(text, normalized)) => {
            if normalized {
                Ok(Value::Str(text))
            } else {
                let mut out = String::new();
                json::write_value(&mut out, &Value::Json(text, false));
                Ok(Value::Str(Cow::Owned(out)))
            }
        }
        (Type::Int, other) => fail(&other, "int"),
        (Type::Float, other) => fail(&other, "float"),
        (Type::Str, Value::Null) => Ok(Value::Null),
    }
}

fn binary<'a>(op: BinaryOp, x: &Value<'a>, y: &Value<'a>) -> Result<Value<'a>, String> {
    use BinaryOp as B;
    if matches!(x, Value::BigInt(_)) || matches!(y, Value::BigInt(_)) {
        return binary(op, &as_double(x.clone()), &as_double(y.clone()));
    }
    match op {
        B::And | B::Or => return logic(op, x, y),
        _ if *x == Value::Null || *y == Value::Null => return Ok(Value::Null),
        _ => {}
    }
    let unsupported = || {
        Err(format!(
            "unsupported operand types for {}: '{}' and '{}'",
            op.symbol(),
            x.type_name(),
            y.type_name()
        ))
    };
    match op {
        B::Add | B::Sub | B::Mul | B::Div | B::FloorDiv | B::Mod => match (x, y) {
            (Value::Int(a), Value::Int(b)) => Ok(int_arith(op, *a, *b)),
            (Value::Int(_) | Value::Float(_), Value::Int(_) | Value::Float(_)) => {
                Ok(float_arith(op, as_f64(x), as_f64(y)))
            }
            (Value::Str(a), Value::Str(b)) if op == B::Add => {
                let mut joined = String::with_capacity(a.len() + b.len());
                joined.push_str(a);
                joined.push_str(b);
                Ok(Value::Str(Cow::Owned(joined)))
            }
            _ => unsupported(),
        },
        B::Eq | B::Ne => {
            if matches!(x, Value::Json(..)) || matches!(y, Value::Json(..)) {
                return unsupported();
            }
            let equal = matches!(compare(x, y), Comparison::Ordered(Ordering::Equal));
            Ok(Value::Bool(equal == (op == B::Eq)))
        }
        B::Lt | B::Le | B::Gt | B::Ge => match compare(x, y) {
            Comparison::Incomparable => unsupported(),
            Comparison::Unordered => Ok(Value::Bool(false)),
            Comparison::Ordered(ordering) => Ok(Value::Bool(match op {
                B::Lt => ordering == Ordering::Less,
                B::Le => ordering != Ordering::Greater,
                B::Gt => ordering == Ordering::Greater,
                _ => ordering != Ordering::Less,
            })),
        },
        B::StartsWith | B::Contains => match (x, y) {
            (Value::Str(a), Value::Str(b)) => Ok(Value::Bool(if op == B::StartsWith {
                a.starts_with(b.as_ref())
            } else {
                a.contains(b.as_ref())
            })),
            _ => unsupported(),
        },
        B::And | B::Or => unreachable!("handled above"),
    }
}

/// Kleene logic: a definite operand decides where it can.
fn logic<'a>(op: BinaryOp, x: &Value<'a>, y: &Value<'a>) -> Result<Value<'a>, String> {
    let truth = |v: &Value<'_>| match v {
        Value::Null => Ok(None),
        Value::Bool(b) => Ok(Some(*b)),
        other => Err(format!(
            "unsupported operand type for {}: '{}' (a bool or None)",
            op.symbol(),
            other.type_name()
        )),
    };
    let (left, right) = (truth(x)?, truth(y)?);
    let decisive = op == BinaryOp::Or;
    Ok(match (left, right) {
        (Some(t), _) | (_, Some(t)) if t == decisive => Value::Bool(decisive),
        (Some(_), Some(_)) => Value::Bool(!decisive),
        _ => Value::Null,
    })
}

fn as_f64(v: &Value<'_>) -> f64 {
    match v {
        Value::Int(i) => *i as f64,
        Value::Float(f) => *f,
        _ => unreachable!("only numbers"),
    }
}

fn int_arith(op: BinaryOp, a: i64, b: i64) -> Value<'static> {
    match op {
        BinaryOp::Add => Value::Int(a.wrapping_add(b)),
        BinaryOp::Sub => Value::Int(a.wrapping_sub(b)),
        BinaryOp::Mul => Value::Int(a.wrapping_mul(b)),
        BinaryOp::Div if b == 0 => Value::Null,
        BinaryOp::Div => Value::Float(a as f64 / b as f64),
        _ if b == 0 => Value::Null,
        BinaryOp::FloorDiv => {
            let q = a.wrapping_div(b);
            let r = a.wrapping_rem(b);
            Value::Int(if r != 0 && ((r < 0) != (b < 0)) {
                q - 1
            } else {
                q
            })
        }
        BinaryOp::Mod => {
            let r = a.wrapping_rem(b);
            Value::Int(if r != 0 && ((r < 0) != (b < 0)) {
                r + b
            } else {
                r
            })
        }
        _ => unreachable!("arithmetic only"),
    }
}

fn float_arith(op: BinaryOp, a: f64, b: f64) -> Value<'static> {
    match op {
        BinaryOp::Add => Value::Float(a + b),
        BinaryOp::Sub => Value::Float(a - b),
        BinaryOp::Mul => Value::Float(a * b),
        _ if b == 0.0 => Value::Null,
        BinaryOp::Div => Value::Float(a / b),
        BinaryOp::FloorDiv => Value::Float(py_divmod(a, b).0),
        BinaryOp::Mod => Value::Float(py_divmod(a, b).1),
        _ => unreachable!("arithmetic only"),
    }
}

/// `CPython`'s float divmod (`floatobject.c`): the floor quotient and a modulo
/// with the divisor's sign; `b` is not zero.
fn py_divmod(a: f64, b: f64) -> (f64, f64) {
    let mut m = a % b;
    let mut div = (a - m) / b;
    if m == 0.0 {
        m = 0.0_f64.copysign(b);
    } else if (b < 0.0) != (m < 0.0) {
        m += b;
        div -= 1.0;
    }
    let floordiv = if div == 0.0 {
        0.0_f64.copysign(a / b)
    } else {
        let f = div.floor();
        if div - f > 0.5 { f + 1.0 } else { f }
    };
    (floordiv, m)
}

/// How two values compare.
enum Comparison {
    Ordered(Ordering),
    /// NaN is neither smaller, equal nor larger.
    Unordered,
    /// Values of types that have no order between them.
    Incomparable,
}

fn compare(x: &Value<'_>, y: &Value<'_>) -> Comparison {
    let ordered = |o: Option<Ordering>| o.map_or(Comparison::Unordered, Comparison::Ordered);
    match (x, y) {
        (Value::Int(a), Value::Int(b)) => Comparison::Ordered(a.cmp(b)),
        (Value::Float(a), Value::Float(b)) => ordered(a.partial_cmp(b)),
        (Value::Int(a), Value::Float(b)) => ordered(cmp_int_float(*a, *b)),
        (Value::Float(a), Value::Int(b)) => ordered(cmp_int_float(*b, *a).map(Ordering::reverse)),
        (Value::Str(a), Value::Str(b)) => Comparison::Ordered(a.cmp(b)),
        (Value::Bool(a), Value::Bool(b)) => Comparison::Ordered(a.cmp(b)),
        _ => Comparison::Incomparable,
    }
}

/// An exact comparison of a long with a double (as Python compares int and float).
fn cmp_int_float(i: i64, f: f64) -> Option<Ordering> {
    if f.is_nan() {
        return None;
    }
    if f >= 9_223_372_036_854_775_808.0 {
        return Some(Ordering::Less);
    }
    if f < -9_223_372_036_854_775_808.0 {
        return Some(Ordering::Greater);
    }
    let t = f.trunc();
    Some(match i.cmp(&(t as i64)) {
        Ordering::Equal => 0.0_f64.partial_cmp(&(f - t)).expect("finite"),
        other => other,
    })
}

/// Writes a debug form of an expression (for `describe()`).
pub fn display(expr: &Expr) -> String {
    let mut out = String::new();
    write_expr(&mut out, expr);
    out
}

fn write_expr(out: &mut String, expr: &Expr) {
    match expr {
        Expr::Col(path) => {
            let _ = write!(out, "col({:?})", path.join("."));
        }
        Expr::Lit(v) => {
            let _ = write!(out, "{v:?}");
        }
        Expr::Unary(op, e) => {
            let _ = write!(out, "{op:?}(");
            write_expr(out, e);
            out.push(')');
        }
        Expr::Binary(op, a, b) => {
            out.push('(');
            write_expr(out, a);
            let _ = write!(out, " {} ", op.symbol());
            write_expr(out, b);
            out.push(')');
        }
        Expr::Struct(members) => {
            out.push_str("struct(");
            for (i, (name, e)) in members.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "{name}=");
                write_expr(out, e);
            }
            out.push(')');
        }
    }
}
