//! JSON ⇄ TOML for the configuration API: a TOML table as JSON (tables as objects, arrays of
//! tables as lists), a JSON object as a TOML table (objects as tables, lists of objects as
//! arrays of tables `[[site.app]]`, the name first), and RFC 7396's merge patch.
//!
//! Owns: those translations, pure, and [`Refusal`] (an edit's refusal). Must not touch: the files (`super`).

use serde_json::{Map, Value};
use toml_edit::{ArrayOfTables, Item, Table};

/// Why an edit was refused: the HTTP status it answers and one line.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal(pub u16, pub String);

pub(super) fn bad(message: impl Into<String>) -> Refusal {
    Refusal(400, message.into())
}

/// RFC 7396's merge patch of `target` by `patch`.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(changes) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(fields) = target {
        for (key, change) in changes {
            if change.is_null() {
                fields.remove(key);
            } else {
                merge_patch(fields.entry(key.clone()).or_insert(Value::Null), change);
            }
        }
    }
}

/// A TOML table as JSON: its values, its tables as objects, its arrays of tables as lists.
pub(super) fn table_json(table: &Table) -> Value {
    let fields = table
        .iter()
        .filter_map(|(k, item)| Some((k.to_string(), item_json(item)?)));
    Value::Object(fields.collect())
}

fn item_json(item: &Item) -> Option<Value> {
    Some(match item {
        Item::None => return None,
        Item::Value(v) => value_json(v),
        Item::Table(t) => table_json(t),
        Item::ArrayOfTables(a) => Value::Array(a.iter().map(table_json).collect()),
    })
}

fn value_json(value: &toml_edit::Value) -> Value {
    use toml_edit::Value as V;
    match value {
        V::String(s) => Value::String(s.value().clone()),
        V::Integer(n) => Value::from(*n.value()),
        V::Float(x) => Value::from(*x.value()),
        V::Boolean(b) => Value::Bool(*b.value()),
        V::Datetime(d) => Value::String(d.value().to_string()),
        V::Array(a) => Value::Array(a.iter().map(value_json).collect()),
        V::InlineTable(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.to_string(), value_json(v)))
                .collect(),
        ),
    }
}

/// A JSON object as a TOML table (`at` names it in a refusal): objects become tables,
/// lists of objects arrays of tables (`[[site.app]]`), the rest values.
pub(super) fn json_table(value: &Value, at: &str) -> Result<Table, Refusal> {
    let Value::Object(fields) = value else {
        return Err(bad(format!("`{at}` is a JSON object")));
    };
    let mut table = Table::new();
    // The name first, as a person writes it (a JSON object's keys come sorted).
    let named = fields.get_key_value("name").into_iter();
    for (key, v) in named.chain(fields.iter().filter(|(k, _)| *k != "name")) {
        let here = format!("{at}.{key}");
        let item = match v {
            Value::Object(_) => Item::Table(json_table(v, &here)?),
            Value::Array(list) if !list.is_empty() && list.iter().all(Value::is_object) => {
                let mut tables = ArrayOfTables::new();
                for (k, t) in list.iter().enumerate() {
                    tables.push(json_table(t, &format!("{here}[{k}]"))?);
                }
                Item::ArrayOfTables(tables)
            }
            _ => Item::Value(json_value(v, &here)?),
        };
        table.insert(key, item);
    }
    Ok(table)
}

fn json_value(value: &Value, at: &str) -> Result<toml_edit::Value, Refusal> {
    Ok(match value {
        Value::Null => {
            return Err(bad(format!(
                "`{at}` is null, which TOML has no word for: leave the key out"
            )))
        }
        Value::Bool(b) => (*b).into(),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i.into(),
            (None, Some(x)) if n.is_f64() => x.into(),
            _ => return Err(bad(format!("`{at}`: {n} is past the integers TOML holds"))),
        },
        Value::String(s) => s.as_str().into(),
        Value::Array(list) => {
            let mut array = toml_edit::Array::new();
            for (k, v) in list.iter().enumerate() {
                array.push(json_value(v, &format!("{at}[{k}]"))?);
            }
            toml_edit::Value::Array(array)
        }
        Value::Object(fields) => {
            let mut inline = toml_edit::InlineTable::new();
            for (k, v) in fields {
                inline.insert(k, json_value(v, &format!("{at}.{k}"))?);
            }
            toml_edit::Value::InlineTable(inline)
        }
    })
}
