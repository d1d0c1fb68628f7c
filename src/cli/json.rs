//! The CLI's JSON forms of keys, values, rows and NDJSON operations.
//!
//! Values: a JSON integer is INTEGER; a number with a fraction or exponent
//! is DOUBLE; a string is STRING; true/false is BOOLEAN;
//! `{"binary":"<base64>"}` is BINARY; `{"value":V,"version":MS}` gives an
//! explicit version. In range bounds `{"inf":"min"}` / `{"inf":"max"}`
//! stand for INF_MIN / INF_MAX; `{"auto_increment":true}` is the placeholder
//! of an auto-increment key column in a put or update.
//!
//! Invariants: these forms are a public interface (scripts parse them); a
//! value prints so that it reads back as the same value, a DOUBLE bit for
//! bit and always with a fraction or exponent.

use base64::Engine;
use serde_json::{Map, Value as Json};

use crate::error::{Error, Result};
use crate::model::api::{
    ColumnValue, Condition, DeleteRow, PutRow, ReturnType, RowExistence, RowWrite, UpdateAction, UpdateRow, WriteResult,
};
use crate::model::capacity::CapacityUnit;
use crate::model::schema::TableSchema;
use crate::model::types::{PkBound, PkBoundValue, PkType, PkValue, PrimaryKey, Row, Value};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

fn describe(j: &Json) -> String {
    let s = j.to_string();
    if s.len() > 60 {
        format!("{}...", &s[..s.floor_char_boundary(57)])
    } else {
        s
    }
}

fn parse_binary(obj: &Map<String, Json>, what: &str) -> Result<Option<Vec<u8>>> {
    match (obj.len(), obj.get("binary")) {
        (1, Some(Json::String(s))) => B64
            .decode(s)
            .map(Some)
            .map_err(|e| Error::param(format!("{what}: {{\"binary\": ...}} must hold base64 text: {e}"))),
        (_, Some(_)) => Err(Error::param(format!(
            "{what}: {{\"binary\": ...}} must hold one base64 string and nothing else"
        ))),
        _ => Ok(None),
    }
}

/// An attribute value (no version wrapper).
pub fn parse_value(j: &Json, what: &str) -> Result<Value> {
    Ok(match j {
        Json::Bool(b) => Value::Boolean(*b),
        Json::String(s) => Value::String(s.clone()),
        Json::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::Integer(i)
            } else if n.is_u64() {
                return Err(Error::param(format!(
                    "{what}: integer {n} is out of the INTEGER (i64) range"
                )));
            } else {
                Value::Double(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Json::Object(o) => match parse_binary(o, what)? {
            Some(b) => Value::Binary(b),
            None => return Err(bad_value(j, what)),
        },
        _ => return Err(bad_value(j, what)),
    })
}

fn bad_value(j: &Json, what: &str) -> Error {
    Error::param(format!(
        "{what}: {} is not a value; use an integer, a number with a fraction (DOUBLE), a string, true/false, or {{\"binary\":\"<base64>\"}}",
        describe(j)
    ))
}

/// A value with an optional explicit version.
fn parse_versioned(j: &Json, what: &str) -> Result<(Value, Option<i64>)> {
    if let Json::Object(o) = j
        && o.contains_key("value")
    {
        for k in o.keys() {
            if k != "value" && k != "version" {
                return Err(Error::param(format!(
                    "{what}: unknown key '{k}' in {{\"value\":V,\"version\":MS}}"
                )));
            }
        }
        let version = match o.get("version") {
            None => None,
            Some(v) => Some(v.as_i64().ok_or_else(|| {
                Error::param(format!(
                    "{what}: version must be an integer number of milliseconds, got {}",
                    describe(v)
                ))
            })?),
        };
        return Ok((parse_value(&o["value"], what)?, version));
    }
    Ok((parse_value(j, what)?, None))
}

fn parse_pk_value(j: &Json, ty: PkType, col: &str) -> Result<PkValue> {
    let what = format!("primary-key column '{col}'");
    let v = match j {
        Json::Number(n) => n.as_i64().map(PkValue::Integer),
        Json::String(s) => Some(PkValue::String(s.clone())),
        Json::Object(o) if o.get("auto_increment") == Some(&Json::Bool(true)) && o.len() == 1 => {
            Some(PkValue::AutoIncrement)
        }
        Json::Object(o) => parse_binary(o, &what)?.map(PkValue::Binary),
        _ => None,
    };
    match v {
        Some(v) if v.pk_type() == ty => Ok(v),
        _ => Err(Error::invalid_pk(format!(
            "{what} is {ty}; got {} (write an integer, a string, {{\"binary\":\"<base64>\"}}, \
             or {{\"auto_increment\":true}} for an auto-increment column)",
            describe(j)
        ))),
    }
}

fn as_object<'a>(j: &'a Json, what: &str) -> Result<&'a Map<String, Json>> {
    j.as_object()
        .ok_or_else(|| Error::param(format!("{what} must be a JSON object, got {}", describe(j))))
}

fn check_pk_names(schema: &TableSchema, obj: &Map<String, Json>) -> Result<()> {
    for k in obj.keys() {
        if !schema.is_pk_column(k) {
            let names: Vec<_> = schema.primary_key.iter().map(|c| c.name.as_str()).collect();
            return Err(Error::invalid_pk(format!(
                "'{k}' is not a primary-key column of table '{}'; its primary key is ({})",
                schema.name,
                names.join(", ")
            )));
        }
    }
    Ok(())
}

/// A full primary key, given as an object keyed by column name.
pub fn parse_pk(schema: &TableSchema, j: &Json) -> Result<PrimaryKey> {
    let obj = as_object(j, "a primary key")?;
    check_pk_names(schema, obj)?;
    let mut pk = PrimaryKey::new();
    for c in &schema.primary_key {
        let v = obj
            .get(&c.name)
            .ok_or_else(|| Error::invalid_pk(format!("primary key is missing column '{}' ({})", c.name, c.pk_type)))?;
        pk.columns
            .push((c.name.clone(), parse_pk_value(v, c.pk_type, &c.name)?));
    }
    Ok(pk)
}

/// A range bound: a prefix of the PK columns; values or `{"inf":"min"|"max"}`.
pub fn parse_bound(schema: &TableSchema, j: &Json) -> Result<PkBound> {
    let obj = as_object(j, "a range bound")?;
    check_pk_names(schema, obj)?;
    let mut b = PkBound::new();
    let mut missing: Option<&str> = None;
    for c in &schema.primary_key {
        let Some(v) = obj.get(&c.name) else {
            missing.get_or_insert(&c.name);
            continue;
        };
        if let Some(m) = missing {
            return Err(Error::invalid_pk(format!(
                "range bound gives '{}' but not '{m}' before it; a bound may only leave out trailing primary-key columns",
                c.name
            )));
        }
        let bv = match v.as_object().and_then(|o| o.get("inf")) {
            Some(Json::String(s)) if s == "min" => PkBoundValue::InfMin,
            Some(Json::String(s)) if s == "max" => PkBoundValue::InfMax,
            Some(other) => {
                return Err(Error::param(format!(
                    "range bound column '{}': {{\"inf\": ...}} must be \"min\" or \"max\", got {}",
                    c.name,
                    describe(other)
                )));
            }
            None => PkBoundValue::Value(parse_pk_value(v, c.pk_type, &c.name)?),
        };
        b.columns.push((c.name.clone(), bv));
    }
    Ok(b)
}

/// One NDJSON operation line.
pub fn parse_op(schema: &TableSchema, line: &str) -> Result<RowWrite> {
    let j: Json = serde_json::from_str(line).map_err(|e| Error::param(format!("not valid JSON: {e}")))?;
    let obj = as_object(&j, "an operation")?;
    let op = obj
        .get("op")
        .and_then(|o| o.as_str())
        .ok_or_else(|| Error::param("an operation needs \"op\": \"put\", \"update\" or \"delete\""))?;
    let allowed: &[&str] = match op {
        "put" => &["op", "pk", "columns", "condition", "return"],
        "update" => &[
            "op",
            "pk",
            "put",
            "delete",
            "delete_all",
            "increment",
            "condition",
            "return",
        ],
        "delete" => &["op", "pk", "condition", "return"],
        other => {
            return Err(Error::param(format!(
                "unknown op '{other}': use \"put\", \"update\" or \"delete\""
            )));
        }
    };
    if let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(Error::param(format!(
            "unknown key '{k}' in a {op} operation; accepted: {}",
            allowed.join(", ")
        )));
    }
    let pk = parse_pk(
        schema,
        obj.get("pk")
            .ok_or_else(|| Error::param(format!("a {op} operation needs \"pk\"")))?,
    )?;
    let condition = match obj.get("condition") {
        Some(c) => parse_condition(c)?,
        None => Condition::default(),
    };
    let return_type = match obj.get("return") {
        None => ReturnType::None,
        Some(Json::String(s)) if s == "none" => ReturnType::None,
        Some(Json::String(s)) if s == "pk" => ReturnType::PrimaryKey,
        Some(Json::String(s)) if s == "after_modify" => ReturnType::AfterModify,
        Some(other) => {
            return Err(Error::param(format!(
                "\"return\" must be \"none\", \"pk\" or \"after_modify\", got {}",
                describe(other)
            )));
        }
    };
    Ok(match op {
        "put" => {
            let mut p = PutRow::new(pk).condition(condition).returning(return_type);
            if let Some(cols) = obj.get("columns") {
                for (name, v) in as_object(cols, "\"columns\"")? {
                    let (value, version) = parse_versioned(v, &format!("column '{name}'"))?;
                    p.columns.push(ColumnValue {
                        name: name.clone(),
                        value,
                        version,
                    });
                }
            }
            RowWrite::Put(p)
        }
        "update" => {
            let mut u = UpdateRow::new(pk).condition(condition).returning(return_type);
            if let Some(cols) = obj.get("put") {
                for (name, v) in as_object(cols, "\"put\"")? {
                    let (value, version) = parse_versioned(v, &format!("column '{name}'"))?;
                    u.actions.push(UpdateAction::Put {
                        name: name.clone(),
                        value,
                        version,
                    });
                }
            }
            if let Some(cols) = obj.get("delete") {
                for (name, v) in as_object(cols, "\"delete\"")? {
                    let versions = v.as_array().ok_or_else(|| {
                        Error::param(format!(
                            "\"delete\" of column '{name}' must be a list of versions (ms), got {}",
                            describe(v)
                        ))
                    })?;
                    for ver in versions {
                        let version = ver.as_i64().ok_or_else(|| {
                            Error::param(format!(
                                "\"delete\" of column '{name}': {} is not an integer version",
                                describe(ver)
                            ))
                        })?;
                        u.actions.push(UpdateAction::DeleteVersion {
                            name: name.clone(),
                            version,
                        });
                    }
                }
            }
            if let Some(cols) = obj.get("delete_all") {
                let names = cols.as_array().ok_or_else(|| {
                    Error::param(format!(
                        "\"delete_all\" must be a list of column names, got {}",
                        describe(cols)
                    ))
                })?;
                for n in names {
                    let name = n
                        .as_str()
                        .ok_or_else(|| Error::param(format!("\"delete_all\": {} is not a column name", describe(n))))?;
                    u.actions.push(UpdateAction::DeleteAll { name: name.to_string() });
                }
            }
            if let Some(cols) = obj.get("increment") {
                for (name, v) in as_object(cols, "\"increment\"")? {
                    let delta = v.as_i64().ok_or_else(|| {
                        Error::param(format!(
                            "\"increment\" of column '{name}' must be an integer (i64), got {}",
                            describe(v)
                        ))
                    })?;
                    u.actions.push(UpdateAction::Increment {
                        name: name.clone(),
                        delta,
                    });
                }
            }
            RowWrite::Update(u)
        }
        _ => RowWrite::Delete(DeleteRow::new(pk).condition(condition).returning(return_type)),
    })
}

/// A write condition: `"ignore"`, `"expect_exist"`, `"expect_not_exist"`,
/// or `{"row": one of those, "column": FILTER}` (each key optional).
pub fn parse_condition(j: &Json) -> Result<Condition> {
    let row = |j: &Json| -> Result<RowExistence> {
        match j.as_str() {
            Some("ignore") => Ok(RowExistence::Ignore),
            Some("expect_exist") => Ok(RowExistence::ExpectExist),
            Some("expect_not_exist") => Ok(RowExistence::ExpectNotExist),
            _ => Err(Error::param(format!(
                "a row condition must be \"ignore\", \"expect_exist\" or \"expect_not_exist\", got {}",
                describe(j)
            ))),
        }
    };
    match j {
        Json::String(_) => Ok(Condition {
            row: row(j)?,
            column: None,
        }),
        Json::Object(o) => {
            if let Some(k) = o.keys().find(|k| *k != "row" && *k != "column") {
                return Err(Error::param(format!(
                    "unknown key '{k}' in \"condition\"; accepted: row, column"
                )));
            }
            Ok(Condition {
                row: o.get("row").map(row).transpose()?.unwrap_or_default(),
                column: o.get("column").map(parse_filter).transpose()?,
            })
        }
        other => Err(Error::param(format!(
            "\"condition\" must be \"ignore\", \"expect_exist\", \"expect_not_exist\" or \
             {{\"row\":...,\"column\":FILTER}}, got {}",
            describe(other)
        ))),
    }
}

/// Capacity units as printed: `{"read":R,"write":W}`.
pub fn cu_json(cu: &CapacityUnit) -> Json {
    serde_json::json!({"read": cu.read, "write": cu.write})
}

/// The result line of a committed write: `{"line":N,"ok":true,"cu":{...}}`
/// plus `"pk"` (asked for, or an auto-increment key) and `"columns"`
/// (`"return":"after_modify"`).
pub fn write_result_json(line: usize, w: &WriteResult) -> Json {
    let mut m = Map::new();
    m.insert("line".into(), Json::from(line));
    m.insert("ok".into(), Json::Bool(true));
    m.insert("cu".into(), cu_json(&w.consumed));
    if let Some(row) = &w.row {
        let Json::Object(r) = row_json(row) else { unreachable!() };
        m.insert("pk".into(), r["pk"].clone());
        if !row.columns.is_empty() {
            m.insert("columns".into(), r["columns"].clone());
        }
    }
    Json::Object(m)
}

/// A value as the CLI prints it: a JSON number, string or boolean, `{"binary":"<base64>"}` for BINARY; a DOUBLE always with a fraction or exponent.
pub fn value_json(v: &Value) -> Json {
    match v {
        Value::Integer(i) => Json::from(*i),
        // serde_json prints a finite f64 with a fraction or exponent (12.0).
        Value::Double(d) => serde_json::Number::from_f64(*d).map(Json::Number).unwrap_or(Json::Null),
        Value::String(s) => Json::String(s.clone()),
        Value::Boolean(b) => Json::Bool(*b),
        Value::Binary(b) => binary_json(b),
    }
}

fn binary_json(b: &[u8]) -> Json {
    let mut m = Map::new();
    m.insert("binary".into(), Json::String(B64.encode(b)));
    Json::Object(m)
}

/// A primary key as a JSON object of its columns.
pub fn pk_json(pk: &PrimaryKey) -> Json {
    let mut m = Map::new();
    for (n, v) in &pk.columns {
        m.insert(
            n.clone(),
            match v {
                PkValue::Integer(i) => Json::from(*i),
                PkValue::String(s) => Json::String(s.clone()),
                PkValue::Binary(b) => binary_json(b),
                PkValue::AutoIncrement => serde_json::json!({"auto_increment": true}),
            },
        );
    }
    Json::Object(m)
}

/// A row as `cellar get` and `cellar scan` print it: `{"pk":{...},"columns":{"c":[{"value":V,"version":MS},...]}}`.
pub fn row_json(row: &Row) -> Json {
    let mut cols = Map::new();
    for (name, cells) in &row.columns {
        let cells = cells
            .iter()
            .map(|c| {
                let mut m = Map::new();
                m.insert("value".into(), value_json(&c.value));
                m.insert("version".into(), Json::from(c.version));
                Json::Object(m)
            })
            .collect();
        cols.insert(name.clone(), Json::Array(cells));
    }
    let mut m = Map::new();
    m.insert("pk".into(), pk_json(&row.primary_key));
    m.insert("columns".into(), Json::Object(cols));
    Json::Object(m)
}

/// A filter: `{"column":C,"op":OP,"value":V,"pass_if_missing":B,
/// "latest_version_only":B}`, `{"and":[F,...]}`, `{"or":[F,...]}`,
/// `{"not":F}` or `{"column_page":{"offset":N,"limit":N}}`.
pub fn parse_filter(j: &Json) -> Result<crate::Filter> {
    use crate::{ColumnCondition, CompareOp, Filter};
    const FORMS: &str = "accepted: {\"column\":C,\"op\":\"=\",\"value\":V[,\"pass_if_missing\":true][,\"latest_version_only\":true]}, \
                         {\"and\":[F,F,...]}, {\"or\":[F,F,...]}, {\"not\":F}, {\"column_page\":{\"offset\":N,\"limit\":N}}";
    let obj = as_object(j, "a filter")?;
    let list = |v: &Json, what: &str| -> Result<Vec<Filter>> {
        v.as_array()
            .ok_or_else(|| Error::param(format!("\"{what}\" needs a list of filters; {FORMS}")))?
            .iter()
            .map(parse_filter)
            .collect()
    };
    let flag = |name: &str, default: bool| -> Result<bool> {
        match obj.get(name) {
            None => Ok(default),
            Some(Json::Bool(b)) => Ok(*b),
            Some(other) => Err(Error::param(format!("\"{name}\" must be true or false, got {other}"))),
        }
    };
    let count = |o: &serde_json::Map<String, Json>, name: &str| -> Result<usize> {
        o.get(name)
            .and_then(|v| v.as_u64())
            .map(|n| n as usize)
            .ok_or_else(|| Error::param(format!("column_page needs \"{name}\", a whole number; {FORMS}")))
    };
    if let Some(v) = obj.get("and") {
        return Ok(Filter::And(list(v, "and")?));
    }
    if let Some(v) = obj.get("or") {
        return Ok(Filter::Or(list(v, "or")?));
    }
    if let Some(v) = obj.get("not") {
        return Ok(Filter::Not(Box::new(parse_filter(v)?)));
    }
    if let Some(v) = obj.get("column_page") {
        let o = as_object(v, "column_page")?;
        return Ok(Filter::ColumnPage {
            offset: count(o, "offset")?,
            limit: count(o, "limit")?,
        });
    }
    let (Some(Json::String(column)), Some(Json::String(op)), Some(value)) =
        (obj.get("column"), obj.get("op"), obj.get("value"))
    else {
        return Err(Error::param(format!("filter {j} is not one Cellar reads; {FORMS}")));
    };
    Ok(Filter::Column(ColumnCondition {
        column: column.clone(),
        op: CompareOp::parse(op)?,
        value: parse_value(value, &format!("the value of the filter on '{column}'"))?,
        pass_if_missing: flag("pass_if_missing", true)?,
        latest_version_only: flag("latest_version_only", true)?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> TableSchema {
        TableSchema::new("t")
            .pk("card", PkType::Integer)
            .pk("order", PkType::String)
    }

    #[test]
    fn value_forms() {
        let j: Json = serde_json::from_str(r#"[3, 3.0, 1e2, "x", true, {"binary":"aGk="}]"#).unwrap();
        let vals: Vec<_> = j
            .as_array()
            .unwrap()
            .iter()
            .map(|v| parse_value(v, "t").unwrap())
            .collect();
        assert_eq!(
            vals,
            vec![
                Value::Integer(3),
                Value::Double(3.0),
                Value::Double(100.0),
                Value::String("x".into()),
                Value::Boolean(true),
                Value::Binary(b"hi".to_vec())
            ]
        );
        assert_eq!(value_json(&Value::Double(12.0)).to_string(), "12.0");
        assert!(parse_value(&serde_json::json!(18446744073709551615u64), "t").is_err());
        assert!(parse_value(&serde_json::json!([1]), "t").is_err());
    }

    #[test]
    fn ops_and_errors() {
        let s = schema();
        let op = parse_op(&s, r#"{"op":"update","pk":{"order":"a","card":1},"put":{"x":{"value":7,"version":5}},"delete":{"n":[1,2]},"delete_all":["ok"]}"#).unwrap();
        let RowWrite::Update(u) = op else { panic!() };
        assert_eq!(u.primary_key.columns[0].0, "card");
        assert_eq!(u.actions.len(), 4);
        for bad in [
            r#"{"op":"upsert","pk":{}}"#,
            r#"{"op":"put","pk":{"card":1}}"#,
            r#"{"op":"put","pk":{"card":"x","order":"a"}}"#,
            r#"{"op":"put","pk":{"card":1,"order":"a"},"colums":{}}"#,
            r#"{"op":"put""#,
        ] {
            assert!(parse_op(&s, bad).is_err(), "{bad}");
        }
        let b = parse_bound(&s, &serde_json::json!({"card": {"inf": "max"}})).unwrap();
        assert_eq!(b.columns, vec![("card".to_string(), PkBoundValue::InfMax)]);
        assert!(parse_bound(&s, &serde_json::json!({"order": "x"})).is_err());
    }
}
