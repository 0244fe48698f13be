//! Expression plans over JSON values: arithmetic, comparisons, logic, casts,
//! structs, and the rows that fail.

use std::borrow::Cow;

use strom_core::expr::{BinaryOp as B, ErrorKind, Expr, Plan, Type, UnaryOp as U, Value};

fn col(path: &str) -> Expr {
    Expr::Col(path.split('.').map(str::to_owned).collect())
}
fn int(i: i64) -> Expr {
    Expr::Lit(Value::Int(i))
}
fn float(f: f64) -> Expr {
    Expr::Lit(Value::Float(f))
}
fn bin(op: B, a: Expr, b: Expr) -> Expr {
    Expr::Binary(op, Box::new(a), Box::new(b))
}
fn un(op: U, a: Expr) -> Expr {
    Expr::Unary(op, Box::new(a))
}

/// The expression's value for each document.
fn eval(expr: &Expr, docs: &[&str]) -> Vec<Value<'static>> {
    let values: Vec<Option<&[u8]>> = docs.iter().map(|d| Some(d.as_bytes())).collect();
    let plan = Plan::compile(expr);
    let out = plan.eval_json(&values);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    (0..docs.len())
        .map(|i| out.value(i).into_owned().into_owned())
        .collect()
}

fn one(expr: &Expr, doc: &str) -> Value<'static> {
    eval(expr, &[doc]).remove(0)
}

#[test]
fn integer_arithmetic_is_java_long_with_python_floor_division() {
    let doc = r#"{"a":-7,"b":2,"max":9223372036854775807,"zero":0}"#;
    assert_eq!(
        one(&bin(B::Add, col("max"), int(1)), doc),
        Value::Int(i64::MIN)
    );
    assert_eq!(
        one(&bin(B::FloorDiv, col("a"), col("b")), doc),
        Value::Int(-4)
    );
    assert_eq!(one(&bin(B::Mod, col("a"), col("b")), doc), Value::Int(1));
    assert_eq!(one(&bin(B::Mod, int(7), int(-2)), doc), Value::Int(-1));
    assert_eq!(
        one(&bin(B::Div, col("a"), col("b")), doc),
        Value::Float(-3.5)
    );
    assert_eq!(
        one(&bin(B::Mul, col("a"), float(0.5)), doc),
        Value::Float(-3.5)
    );
    for op in [B::Div, B::FloorDiv, B::Mod] {
        assert_eq!(one(&bin(op, col("a"), col("zero")), doc), Value::Null);
        assert_eq!(one(&bin(op, col("a"), float(0.0)), doc), Value::Null);
    }
}

#[test]
fn float_floor_division_and_modulo_follow_python() {
    let cases = [
        (7.5, 2.0, 3.0, 1.5),
        (-7.5, 2.0, -4.0, 0.5),
        (7.5, -2.0, -4.0, -0.5),
    ];
    for (a, b, q, r) in cases {
        assert_eq!(
            one(&bin(B::FloorDiv, float(a), float(b)), "{}"),
            Value::Float(q)
        );
        assert_eq!(one(&bin(B::Mod, float(a), float(b)), "{}"), Value::Float(r));
    }
}

#[test]
fn nulls_propagate_and_logic_is_three_valued() {
    let docs = [r#"{"x":1}"#, r#"{"x":null}"#, "{}", "[1,2]", "5"];
    let plus = eval(&bin(B::Add, col("x"), int(1)), &docs);
    assert_eq!(plus[0], Value::Int(2));
    assert!(plus[1..].iter().all(|v| *v == Value::Null));
    let t = Expr::Lit(Value::Bool(true));
    let f = Expr::Lit(Value::Bool(false));
    let null = Expr::Lit(Value::Null);
    assert_eq!(
        one(&bin(B::And, f.clone(), null.clone()), "{}"),
        Value::Bool(false)
    );
    assert_eq!(
        one(&bin(B::And, t.clone(), null.clone()), "{}"),
        Value::Null
    );
    assert_eq!(
        one(&bin(B::Or, null.clone(), t.clone()), "{}"),
        Value::Bool(true)
    );
    assert_eq!(one(&bin(B::Or, f, null.clone()), "{}"), Value::Null);
    assert_eq!(one(&un(U::Not, null.clone()), "{}"), Value::Null);
    assert_eq!(one(&un(U::IsNull, col("x")), "{}"), Value::Bool(true));
    assert_eq!(
        one(&un(U::IsNull, col("x")), r#"{"x":0}"#),
        Value::Bool(false)
    );
}

#[test]
fn comparisons() {
    let doc = r#"{"i":9007199254740993,"f":9007199254740992.0,"s":"abc","n":1}"#;
    // Exact int/float comparison (2^53 + 1 > 2^53 as a double).
    assert_eq!(one(&bin(B::Gt, col("i"), col("f")), doc), Value::Bool(true));
    assert_eq!(
        one(&bin(B::Eq, col("n"), float(1.0)), doc),
        Value::Bool(true)
    );
    assert_eq!(one(&bin(B::Eq, col("s"), int(1)), doc), Value::Bool(false));
    assert_eq!(one(&bin(B::Ne, col("s"), int(1)), doc), Value::Bool(true));
    assert_eq!(
        one(
            &bin(B::Lt, col("s"), Expr::Lit(Value::Str("abd".into()))),
            doc
        ),
        Value::Bool(true)
    );
    let nan = bin(B::Div, float(0.0), float(0.0));
    assert_eq!(
        one(&nan, doc),
        Value::Null,
        "0/0 is a division by zero: null"
    );
    let nan = Expr::Lit(Value::Float(f64::NAN));
    assert_eq!(
        one(&bin(B::Eq, nan.clone(), nan.clone()), doc),
        Value::Bool(false)
    );
    assert_eq!(one(&bin(B::Lt, nan, float(1.0)), doc), Value::Bool(false));
}

#[test]
fn strings_and_casts() {
    let doc = r#"{"s":"Straße","n":" 42 ","f":-2.7,"b":true,"big":1e300}"#;
    assert_eq!(
        one(&un(U::Upper, col("s")), doc),
        Value::Str("STRASSE".into())
    );
    assert_eq!(
        one(&un(U::Lower, col("s")), doc),
        Value::Str("straße".into())
    );
    let st = Expr::Lit(Value::Str("Str".into()));
    assert_eq!(
        one(&bin(B::StartsWith, col("s"), st), doc),
        Value::Bool(true)
    );
    let sub = Expr::Lit(Value::Str("aß".into()));
    assert_eq!(
        one(&bin(B::Contains, col("s"), sub), doc),
        Value::Bool(true)
    );
    assert_eq!(one(&un(U::Cast(Type::Int), col("n")), doc), Value::Int(42));
    assert_eq!(one(&un(U::Cast(Type::Int), col("f")), doc), Value::Int(-2));
    assert_eq!(
        one(&un(U::Cast(Type::Float), col("b")), doc),
        Value::Float(1.0)
    );
    assert_eq!(
        one(&un(U::Cast(Type::Str), col("f")), doc),
        Value::Str("-2.7".into())
    );
    assert_eq!(
        one(&un(U::Cast(Type::Str), col("big")), doc),
        Value::Str("1e+300".into())
    );
    let concat = bin(B::Add, col("s"), Expr::Lit(Value::Str("!".into())));
    assert_eq!(one(&concat, doc), Value::Str(Cow::Owned("Straße!".into())));
}

#[test]
fn failing_rows_are_named_and_the_rest_evaluate() {
    let docs: [&[u8]; 4] = [br#"{"a":1}"#, br#"{"a":"x"}"#, b"{oops", br#"{"a":"12x"}"#];
    let values: Vec<Option<&[u8]>> = docs.iter().map(|d| Some(*d)).collect();
    let plus_plan = Plan::compile(&bin(B::Add, col("a"), int(1)));
    let plus = plus_plan.eval_json(&values);
    let kinds: Vec<(usize, ErrorKind)> = plus.errors.iter().map(|e| (e.row, e.kind)).collect();
    assert_eq!(
        kinds,
        vec![
            (1, ErrorKind::Eval),
            (2, ErrorKind::Malformed),
            (3, ErrorKind::Eval)
        ]
    );
    assert!(
        plus.errors[0].message.contains("'str' and 'int'"),
        "{}",
        plus.errors[0].message
    );
    assert_eq!(*plus.value(0), Value::Int(2));
    let cast_plan = Plan::compile(&un(U::Cast(Type::Int), col("a")));
    let cast = cast_plan.eval_json(&values);
    assert_eq!(cast.errors[0].message, r#"cannot cast str "x" to int"#);
}

#[test]
fn structs_are_written_as_json_and_filters_keep_true_rows() {
    let expr = Expr::Struct(vec![
        ("auction".into(), col("auction")),
        (
            "price".into(),
            bin(B::FloorDiv, bin(B::Mul, col("price"), int(89)), int(100)),
        ),
        (
            "both".into(),
            Expr::Struct(vec![("d".into(), bin(B::Div, col("price"), int(4)))]),
        ),
        ("tags".into(), col("tags")),
    ]);
    let docs = [
        r#"{"auction":5,"price":1000,"tags":[ "a" ]}"#,
        r#"{"price":3}"#,
    ];
    let out = eval(&expr, &docs);
    let text = |v: &Value<'_>| match v {
        Value::Json(t, true) => t.to_string(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        text(&out[0]),
        r#"{"auction":5,"price":890,"both":{"d":250.0},"tags":["a"]}"#
    );
    assert_eq!(
        text(&out[1]),
        r#"{"auction":null,"price":2,"both":{"d":0.75},"tags":null}"#
    );

    let filter = bin(B::Eq, bin(B::Mod, col("auction"), int(2)), int(1));
    let values: Vec<Option<&[u8]>> = [
        r#"{"auction":1}"#,
        r#"{"auction":2}"#,
        "{}",
        r#"{"auction":3}"#,
    ]
    .iter()
    .map(|d| Some(d.as_bytes()))
    .chain([None])
    .collect();
    assert_eq!(
        Plan::compile(&filter).eval_json(&values).true_rows(),
        vec![0, 3]
    );
}

#[test]
fn a_field_read_twice() {
    let expr = bin(B::Add, col("a"), bin(B::Mul, col("a"), col("a")));
    assert_eq!(one(&expr, r#"{"a":3}"#), Value::Int(12));
}

/// Fields a struct only copies are copied as they were read when that is how
/// they are written, and rewritten otherwise: the output equals that of the
/// same fields decoded (here read by an operator too, which decodes them).
#[test]
fn copied_fields_are_written_as_decoded_ones() {
    let names = ["i", "z", "f", "s", "e", "o", "t", "n", "m"];
    let copied = Expr::Struct(names.iter().map(|&n| (n.into(), col(n))).collect());
    // `x.is_null()` beside each field: every field decoded, none copied.
    let decoded = Expr::Struct(
        names
            .iter()
            .map(|&n| (n.into(), col(n)))
            .chain(
                names
                    .iter()
                    .map(|&n| (format!("{n}?"), un(U::IsNull, col(n)))),
            )
            .collect(),
    );
    let docs = [
        r#"{"i":1700000000000,"z":-0,"f":1.0e2,"s":"\u0041\/","e":"😀é","o":{ "k" : [1, 2.50, "\u00e9"] },"t":true,"n":null}"#,
        r#"{"i":-5,"z":0,"f":-0.0,"s":"plain","e":"x","o":[],"t":false,"n":7}"#,
        r#"{"i":123456789012345678901234,"z":"-0","f":1E-7,"s":"","e":"\ud83d\ude00","o":{},"t":"true","n":"null"}"#,
    ];
    let text = |v: Value<'static>| match v {
        Value::Json(t, true) => t.into_owned(),
        other => panic!("{other:?}"),
    };
    for doc in docs {
        let fast = text(one(&copied, doc));
        let full = text(one(&decoded, doc));
        let members = full.split_once(",\"i?\"").unwrap().0;
        assert_eq!(fast, format!("{members}}}"), "{doc}");
    }
    assert_eq!(
        text(one(&copied, docs[0])),
        r#"{"i":1700000000000,"z":0,"f":100.0,"s":"A/","e":"\uD83D\uDE00é","o":{"k":[1,2.5,"é"]},"t":true,"n":null,"m":null}"#
    );
}
