//! `ExprPlan`: an expression compiled once (pydantic-core's habit), then
//! evaluated over a batch of values per call, detached from the interpreter.
//! Also the JSON encoder of `serdes.Json`, so that both write the same bytes.
//!
//! The Python layer (python/strom/expr.py) hands the tree over as nested
//! tuples: `("col", ("a", "b"))`, `("lit", v)`, `("unary", op, e)`,
//! `("binary", op, a, b)`, `("struct", (("name", e), …))`.

use std::borrow::Cow;

use pyo3::IntoPyObjectExt;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::log::bytes_or_none;
use strom_core::expr::json::{write_double, write_str, write_value};
use strom_core::expr::pipeline::{Pipeline, Step};
use strom_core::expr::{
    BinaryOp, ErrorKind, Evaluated, Expr, FieldTree, Plan, RowError, Type, UnaryOp, Value,
};

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |n| n.to_string())
}

fn parse(tree: &Bound<'_, PyAny>) -> PyResult<Expr> {
    let t = tree.cast::<PyTuple>()?;
    let tag: String = t.get_item(0)?.extract()?;
    Ok(match tag.as_str() {
        "col" => Expr::Col(t.get_item(1)?.extract()?),
        "lit" => Expr::Lit(py_scalar(&t.get_item(1)?)?),
        "unary" => {
            let op: String = t.get_item(1)?.extract()?;
            let op = match op.as_str() {
                "not" => UnaryOp::Not,
                "neg" => UnaryOp::Neg,
                "is_null" => UnaryOp::IsNull,
                "upper" => UnaryOp::Upper,
                "lower" => UnaryOp::Lower,
                "cast_int" => UnaryOp::Cast(Type::Int),
                "cast_float" => UnaryOp::Cast(Type::Float),
                "cast_str" => UnaryOp::Cast(Type::Str),
                other => return Err(PyValueError::new_err(format!("unknown operator {other:?}"))),
            };
            Expr::Unary(op, Box::new(parse(&t.get_item(2)?)?))
        }
        "binary" => {
            let op: String = t.get_item(1)?.extract()?;
            let op = match op.as_str() {
                "add" => BinaryOp::Add,
                "sub" => BinaryOp::Sub,
                "mul" => BinaryOp::Mul,
                "truediv" => BinaryOp::Div,
                "floordiv" => BinaryOp::FloorDiv,
                "mod" => BinaryOp::Mod,
                "eq" => BinaryOp::Eq,
                "ne" => BinaryOp::Ne,
                "lt" => BinaryOp::Lt,
                "le" => BinaryOp::Le,
                "gt" => BinaryOp::Gt,
                "ge" => BinaryOp::Ge,
                "and" => BinaryOp::And,
                "or" => BinaryOp::Or,
                "startswith" => BinaryOp::StartsWith,
                "contains" => BinaryOp::Contains,
                other => return Err(PyValueError::new_err(format!("unknown operator {other:?}"))),
            };
            Expr::Binary(
                op,
                Box::new(parse(&t.get_item(2)?)?),
                Box::new(parse(&t.get_item(3)?)?),
            )
        }
        "struct" => {
            let mut members = Vec::new();
            for member in t.get_item(1)?.try_iter()? {
                let member = member?;
                let (name, e): (String, Bound<'_, PyAny>) = member.extract()?;
                members.push((name, parse(&e)?));
            }
            Expr::Struct(members)
        }
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown expression {other:?}"
            )));
        }
    })
}

/// A Python value as a cell; dicts and lists become JSON text.
fn py_scalar(obj: &Bound<'_, PyAny>) -> PyResult<Value<'static>> {
    if obj.is_none() {
        Ok(Value::Null)
    } else if let Ok(b) = obj.cast::<PyBool>() {
        Ok(Value::Bool(b.is_true()))
    } else if obj.is_instance_of::<PyInt>() {
        obj.extract::<i64>()
            .map(Value::Int)
            .map_err(|_| PyValueError::new_err(format!("int {obj} does not fit a 64-bit long")))
    } else if let Ok(f) = obj.cast::<PyFloat>() {
        Ok(Value::Float(f.value()))
    } else if let Ok(s) = obj.cast::<PyString>() {
        Ok(Value::Str(Cow::Owned(s.to_str()?.to_owned())))
    } else {
        let mut text = String::new();
        write_py(&mut text, obj)?;
        Ok(Value::Json(Cow::Owned(text), true))
    }
}

/// A cell as a Python object; JSON text becomes dicts and lists.
fn to_py<'py>(
    py: Python<'py>,
    v: &Value<'_>,
    json: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    match v {
        Value::Null => Ok(py.None().into_bound(py)),
        Value::Bool(b) => b.into_bound_py_any(py),
        Value::Int(i) => i.into_bound_py_any(py),
        Value::Float(f) => f.into_bound_py_any(py),
        Value::Str(s) => Ok(PyString::new(py, s).into_any()),
        Value::BigInt(digits) | Value::Json(digits, _) => json.call1((digits.as_ref(),)),
    }
}

/// Nesting deeper than this is refused (a cycle would recurse forever;
/// Jackson's own limit for reading is 1000).
const MAX_DEPTH: usize = 1000;

/// Python's `json.dumps` types written as Jackson writes them (see
/// strom-core's `expr::json`); dict keys as Python's `json` converts them.
fn write_py(out: &mut String, obj: &Bound<'_, PyAny>) -> PyResult<()> {
    write_nested(out, obj, 0)
}

fn write_nested(out: &mut String, obj: &Bound<'_, PyAny>, depth: usize) -> PyResult<()> {
    if depth > MAX_DEPTH {
        return Err(PyValueError::new_err(format!(
            "nested deeper than {MAX_DEPTH} levels (or a circular reference)"
        )));
    }
    if obj.is_none() {
        out.push_str("null");
    } else if let Ok(b) = obj.cast::<PyBool>() {
        out.push_str(if b.is_true() { "true" } else { "false" });
    } else if obj.is_instance_of::<PyInt>() {
        match obj.extract::<i64>() {
            Ok(i) => write_value(out, &Value::Int(i)),
            Err(_) => out.push_str(&obj.str()?.to_cow()?),
        }
    } else if let Ok(f) = obj.cast::<PyFloat>() {
        write_double(out, f.value());
    } else if let Ok(s) = obj.cast::<PyString>() {
        write_str(out, &s.to_cow()?);
    } else if let Ok(d) = obj.cast::<PyDict>() {
        out.push('{');
        for (i, (k, v)) in d.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_str(out, &dict_key(&k)?);
            out.push(':');
            write_nested(out, &v, depth + 1)?;
        }
        out.push('}');
    } else if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        out.push('[');
        for (i, item) in obj.try_iter()?.enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_nested(out, &item?, depth + 1)?;
        }
        out.push(']');
    } else {
        return Err(PyTypeError::new_err(format!(
            "Object of type {} is not JSON serializable",
            type_name(obj)
        )));
    }
    Ok(())
}

fn dict_key(k: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = k.cast::<PyString>() {
        return Ok(s.to_str()?.to_owned());
    }
    if k.is_none() {
        return Ok("null".to_owned());
    }
    if let Ok(b) = k.cast::<PyBool>() {
        return Ok(if b.is_true() { "true" } else { "false" }.to_owned());
    }
    if k.is_instance_of::<PyInt>() {
        return Ok(k.str()?.to_str()?.to_owned());
    }
    if let Ok(f) = k.cast::<PyFloat>() {
        let mut s = String::new();
        write_double(&mut s, f.value());
        return Ok(s.trim_matches('"').to_owned());
    }
    Err(PyTypeError::new_err(format!(
        "keys must be str, int, float, bool or None, not {}",
        type_name(k)
    )))
}

/// `serdes.Json`'s serializer over a list: each object as Jackson writes it.
#[pyfunction]
fn encode_json<'py>(values: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
    let py = values.py();
    let out = PyList::empty(py);
    let mut text = String::new();
    for item in values.iter() {
        if item.is_none() {
            out.append(py.None())?;
        } else {
            text.clear();
            write_py(&mut text, &item)?;
            out.append(PyBytes::new(py, text.as_bytes()))?;
        }
    }
    Ok(out)
}

/// The values that are not JSON, as `(index, message)` (None is a null
/// value, not an error); read detached.
#[pyfunction]
fn json_errors(values: &Bound<'_, PyList>) -> PyResult<Vec<(usize, String)>> {
    let held = Held::new(values)?;
    let slices = held.slices();
    Ok(values.py().detach(|| FieldTree::validate(&slices)))
}

/// The values of a batch as `bytes` objects, held (a reference each) so
/// that their contents can be read detached without a copy: a `bytes`
/// object never changes, and these references keep each one alive even if
/// the list is changed meanwhile.
struct Held<'py> {
    items: Vec<Option<Bound<'py, PyBytes>>>,
}

impl<'py> Held<'py> {
    fn new(values: &Bound<'py, PyList>) -> PyResult<Self> {
        let items = values
            .iter()
            .map(|item| bytes_or_none(item, "a raw JSON value"))
            .collect::<PyResult<_>>()?;
        Ok(Held { items })
    }

    fn slices(&self) -> Vec<Option<&[u8]>> {
        self.items
            .iter()
            .map(|b| b.as_ref().map(PyBytesMethods::as_bytes))
            .collect()
    }
}

/// The fields a plan reads, from Python objects (dicts, nested by path).
fn py_columns(
    plan: &Plan,
    values: &Bound<'_, PyList>,
) -> (Vec<Vec<Value<'static>>>, Vec<RowError>) {
    let paths = plan.fields().paths();
    let mut columns: Vec<Vec<Value<'static>>> = paths
        .iter()
        .map(|_| Vec::with_capacity(values.len()))
        .collect();
    let mut errors = Vec::new();
    for (row, value) in values.iter().enumerate() {
        let mut failed = false;
        for (column, path) in columns.iter_mut().zip(paths) {
            let cell = field(&value, path).and_then(|found| match found {
                Some(obj) => py_scalar(&obj),
                None => Ok(Value::Null),
            });
            column.push(cell.unwrap_or_else(|e| {
                if !failed {
                    failed = true;
                    errors.push(RowError {
                        row,
                        kind: ErrorKind::Eval,
                        message: e.to_string(),
                    });
                }
                Value::Null
            }));
        }
    }
    (columns, errors)
}

/// `value[path[0]][path[1]]…`, None where a level is missing or not a dict.
fn field<'py>(value: &Bound<'py, PyAny>, path: &[String]) -> PyResult<Option<Bound<'py, PyAny>>> {
    let mut at = value.clone();
    for name in path {
        let Ok(dict) = at.cast::<PyDict>() else {
            return Ok(None);
        };
        match dict.get_item(name)? {
            Some(v) => at = v,
            None => return Ok(None),
        }
    }
    Ok(Some(at))
}

fn errors_list<'py>(py: Python<'py>, errors: &[RowError]) -> PyResult<Bound<'py, PyList>> {
    PyList::new(
        py,
        errors.iter().map(|e| {
            let kind = match e.kind {
                ErrorKind::Malformed => "malformed",
                ErrorKind::Eval => "eval",
            };
            (e.row, kind, e.message.as_str())
        }),
    )
}

/// An expression compiled for evaluation over batches.
#[pyclass(module = "strom._core", frozen)]
pub struct ExprPlan {
    plan: Plan,
}

impl ExprPlan {
    /// Evaluates over `values` (raw JSON bytes, or Python objects) and hands
    /// the result to `finish` while the inputs are alive.
    fn run<R>(
        &self,
        values: &Bound<'_, PyList>,
        raw: bool,
        finish: impl FnOnce(&Evaluated<'_>) -> PyResult<R>,
    ) -> PyResult<R> {
        let py = values.py();
        if raw {
            let held = Held::new(values)?;
            let slices = held.slices();
            let evaluated = py.detach(|| self.plan.eval_json(&slices));
            finish(&evaluated)
        } else {
            let (columns, errors) = py_columns(&self.plan, values);
            let rows = values.len();
            let evaluated = py.detach(|| self.plan.eval(columns, rows, errors));
            finish(&evaluated)
        }
    }
}

#[pymethods]
impl ExprPlan {
    #[new]
    fn new(tree: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(ExprPlan {
            plan: Plan::compile(&parse(tree)?),
        })
    }

    /// The field paths the expression reads.
    #[getter]
    fn fields(&self) -> Vec<Vec<String>> {
        self.plan.fields().paths().to_vec()
    }

    /// The rows whose result is true, and the failed rows as
    /// `(row, "malformed" | "eval", message)`.
    #[pyo3(signature = (values, *, raw))]
    fn filter<'py>(
        &self,
        values: &Bound<'py, PyList>,
        raw: bool,
    ) -> PyResult<(Vec<usize>, Bound<'py, PyList>)> {
        self.run(values, raw, |e| {
            Ok((e.true_rows(), errors_list(values.py(), &e.errors)?))
        })
    }

    /// Each row's result as JSON bytes (a null result: None), and the failed rows.
    #[pyo3(signature = (values, *, raw))]
    fn to_json<'py>(
        &self,
        values: &Bound<'py, PyList>,
        raw: bool,
    ) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
        let py = values.py();
        self.run(values, raw, |e| {
            let rows = py.detach(|| e.to_json());
            let out = PyList::new(
                py,
                rows.spans
                    .iter()
                    .map(|span| span.map(|(a, b)| PyBytes::new(py, &rows.text.as_bytes()[a..b]))),
            )?;
            Ok((out, errors_list(py, &e.errors)?))
        })
    }

    /// Each row's result as a Python object, and the failed rows.
    #[pyo3(signature = (values, *, raw))]
    fn to_python<'py>(
        &self,
        values: &Bound<'py, PyList>,
        raw: bool,
    ) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
        let py = values.py();
        let loads = py.import("json")?.getattr("loads")?;
        self.run(values, raw, |e| {
            let out = PyList::new(
                py,
                (0..e.rows)
                    .map(|row| to_py(py, &e.value(row), &loads))
                    .collect::<PyResult<Vec<_>>>()?,
            )?;
            Ok((out, errors_list(py, &e.errors)?))
        })
    }

    fn __repr__(&self) -> String {
        format!("ExprPlan(fields={:?})", self.plan.fields().paths())
    }
}

/// The expression steps between a `Json` source and its sink, run over a
/// batch read from the log in one call (`NativeProducer.produce_fused`).
#[pyclass(module = "strom._core", frozen)]
pub struct ExprPipeline {
    pub(crate) pipeline: Pipeline,
    utf8_keys: bool,
}

#[pymethods]
impl ExprPipeline {
    /// `steps`: `("filter" | "filter_not" | "map", plan)` in order, a map's
    /// plan being a `struct`.
    #[new]
    #[pyo3(signature = (steps, *, utf8_keys))]
    #[allow(
        clippy::needless_pass_by_value,
        reason = "PyO3 extracts owned sequences"
    )]
    fn new(steps: Vec<(String, Py<ExprPlan>)>, utf8_keys: bool) -> PyResult<Self> {
        let steps = steps
            .iter()
            .map(|(kind, plan)| {
                let plan = plan.get().plan.clone();
                match kind.as_str() {
                    "filter" => Ok(Step::Filter {
                        plan,
                        negate: false,
                    }),
                    "filter_not" => Ok(Step::Filter { plan, negate: true }),
                    "map" if plan.is_struct() => Ok(Step::MapStruct(plan)),
                    other => Err(PyValueError::new_err(format!(
                        "unknown step {other:?}: 'filter', 'filter_not', or 'map' of a struct"
                    ))),
                }
            })
            .collect::<PyResult<_>>()?;
        Ok(ExprPipeline {
            pipeline: Pipeline::new(steps, utf8_keys),
            utf8_keys,
        })
    }

    fn __repr__(&self) -> String {
        format!("ExprPipeline(utf8_keys={})", self.utf8_keys)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ExprPlan>()?;
    m.add_class::<ExprPipeline>()?;
    m.add_function(wrap_pyfunction!(encode_json, m)?)?;
    m.add_function(wrap_pyfunction!(json_errors, m)?)?;
    Ok(())
}
