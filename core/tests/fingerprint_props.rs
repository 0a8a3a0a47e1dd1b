//! Properties of the fingerprint's canonical form (MODEL.md, I4 and "Fingerprints").

use idem_core::Fingerprint;
use proptest::prelude::*;
use serde_json::{Map, Value};

/// Arbitrary JSON values, nested a few levels, with object members in arbitrary order.
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        // Eighths are exact in binary and short in decimal, so parsing the canonical text
        // back gives the same float (serde_json's default parser is not correctly rounded
        // for long decimals; the writer is, and that is what the fingerprint hashes).
        (-1_000_000i32..1_000_000).prop_map(|k| Value::from(f64::from(k) / 8.0)),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            proptest::collection::vec((".{0,6}", inner), 0..5)
                .prop_map(|members| Value::Object(members.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn fields() -> impl Strategy<Value = Vec<(String, Value)>> {
    proptest::collection::btree_map("[a-z_]{1,8}", json(), 0..6)
        .prop_map(|map| map.into_iter().collect())
}

fn fingerprint(fields: &[(String, Value)]) -> Fingerprint {
    fields
        .iter()
        .fold(Fingerprint::builder(), |b, (name, value)| {
            b.field(name.clone(), value)
        })
        .finish()
        .unwrap()
}

proptest! {
    /// The order in which fields are added never changes the fingerprint.
    #[test]
    fn field_order_does_not_matter(fields in fields(), seed in any::<u64>()) {
        let mut shuffled = fields.clone();
        // A seeded Fisher-Yates shuffle.
        let mut state = seed | 1;
        for i in (1..shuffled.len()).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let j = usize::try_from(state % (i as u64 + 1)).unwrap();
            shuffled.swap(i, j);
        }
        prop_assert_eq!(fingerprint(&fields), fingerprint(&shuffled));
    }

    /// The canonical text is compact JSON that means the same value, with every object's
    /// members sorted by name.
    #[test]
    fn canonical_json_is_sorted_compact_and_faithful(fields in fields()) {
        let builder = fields
            .iter()
            .fold(Fingerprint::builder(), |b, (name, value)| b.field(name.clone(), value));
        let text = builder.canonical_json().unwrap().to_owned();
        let parsed: Value = serde_json::from_str(&text).unwrap();
        let expected: Map<String, Value> = fields.iter().cloned().collect();
        prop_assert_eq!(&parsed, &Value::Object(expected));
        fn sorted(value: &Value) -> bool {
            match value {
                Value::Object(map) => {
                    let names: Vec<_> = map.keys().collect();
                    names.windows(2).all(|w| w[0].as_bytes() < w[1].as_bytes())
                        && map.values().all(sorted)
                }
                Value::Array(items) => items.iter().all(sorted),
                _ => true,
            }
        }
        prop_assert!(sorted(&parsed));
        // Re-serialising the parsed value with sorted maps gives the same bytes: no
        // whitespace, nothing added.
        prop_assert_eq!(serde_json::to_string(&parsed).unwrap(), text);
    }

    /// Changing any one field's value changes the fingerprint.
    #[test]
    fn another_value_is_another_fingerprint(fields in fields(), extra in json()) {
        prop_assume!(!fields.is_empty());
        let mut changed = fields.clone();
        prop_assume!(changed[0].1 != extra);
        changed[0].1 = extra;
        prop_assert_ne!(fingerprint(&fields), fingerprint(&changed));
    }
}
