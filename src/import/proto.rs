//! The protobuf messages an AndroidControl record holds, written by hand with prost derives (no build-time
//! protoc), with only the fields the importer reads; prost skips the others.
//!
//! * `tf.train.Example` and its features: `tensorflow/core/example/example.proto` and `feature.proto`.
//! * `AndroidAccessibilityForest` and what it holds: `google-deepmind/android_env`
//!   `android_env/proto/a11y/{android_accessibility_forest,android_accessibility_window_info,
//!   android_accessibility_tree,android_accessibility_node_info,rect}.proto`.

use std::collections::HashMap;

/// `tf.train.Example { Features features = 1; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Example {
    /// The named features.
    #[prost(message, optional, tag = "1")]
    pub features: Option<Features>,
}

/// `tf.train.Features { map<string, Feature> feature = 1; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Features {
    /// Feature name → value list.
    #[prost(map = "string, message", tag = "1")]
    pub feature: HashMap<String, Feature>,
}

/// `tf.train.Feature { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Feature {
    /// The list.
    #[prost(oneof = "Kind", tags = "1, 2, 3")]
    pub kind: Option<Kind>,
}

/// The value list of a feature.
#[derive(Clone, PartialEq, prost::Oneof)]
pub(super) enum Kind {
    /// `bytes_list = 1`.
    #[prost(message, tag = "1")]
    Bytes(BytesList),
    /// `float_list = 2`.
    #[prost(message, tag = "2")]
    Float(FloatList),
    /// `int64_list = 3`.
    #[prost(message, tag = "3")]
    Int64(Int64List),
}

/// `tf.train.BytesList { repeated bytes value = 1; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct BytesList {
    /// The values.
    #[prost(bytes = "vec", repeated, tag = "1")]
    pub value: Vec<Vec<u8>>,
}

/// `tf.train.FloatList { repeated float value = 1 [packed = true]; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct FloatList {
    /// The values.
    #[prost(float, repeated, tag = "1")]
    pub value: Vec<f32>,
}

/// `tf.train.Int64List { repeated int64 value = 1 [packed = true]; }` (prost also reads the unpacked encoding).
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Int64List {
    /// The values.
    #[prost(int64, repeated, tag = "1")]
    pub value: Vec<i64>,
}

impl Example {
    fn kind(&self, key: &str) -> Option<&Kind> {
        self.features.as_ref()?.feature.get(key)?.kind.as_ref()
    }

    /// The byte strings of feature `key` (`None` when absent or of another kind).
    pub fn bytes(&self, key: &str) -> Option<&[Vec<u8>]> {
        match self.kind(key)? {
            Kind::Bytes(b) => Some(&b.value),
            _ => None,
        }
    }

    /// The integers of feature `key` (`None` when absent or of another kind).
    pub(crate) fn ints(&self, key: &str) -> Option<&[i64]> {
        match self.kind(key)? {
            Kind::Int64(l) => Some(&l.value),
            _ => None,
        }
    }
}

/// `AndroidAccessibilityForest { repeated AndroidAccessibilityWindowInfo windows = 1; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Forest {
    /// The windows on screen.
    #[prost(message, repeated, tag = "1")]
    pub windows: Vec<Window>,
}

/// `AndroidAccessibilityWindowInfo`: `bounds_in_screen = 1`, `layer = 4` (greater is in front), `window_type = 6`,
/// `tree = 11`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Window {
    /// The window's bounds.
    #[prost(message, optional, tag = "1")]
    pub bounds_in_screen: Option<Rect>,
    /// Z-order: windows with a greater layer are in front.
    #[prost(int32, tag = "4")]
    pub layer: i32,
    /// 1 application, 2 input method, 3 system, 4 accessibility overlay, 5 split-screen divider.
    #[prost(int32, tag = "6")]
    pub window_type: i32,
    /// The window's nodes.
    #[prost(message, optional, tag = "11")]
    pub tree: Option<Tree>,
}

/// `AndroidAccessibilityTree { repeated AndroidAccessibilityNodeInfo nodes = 1; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Tree {
    /// The nodes.
    #[prost(message, repeated, tag = "1")]
    pub nodes: Vec<Node>,
}

/// `AndroidAccessibilityNodeInfo`, the fields that locate an element.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Node {
    /// `unique_id = 1`.
    #[prost(int32, tag = "1")]
    pub unique_id: i32,
    /// `bounds_in_screen = 2`.
    #[prost(message, optional, tag = "2")]
    pub bounds_in_screen: Option<Rect>,
    /// `is_clickable = 14`.
    #[prost(bool, tag = "14")]
    pub is_clickable: bool,
    /// `is_editable = 15`.
    #[prost(bool, tag = "15")]
    pub is_editable: bool,
    /// `is_long_clickable = 19`.
    #[prost(bool, tag = "19")]
    pub is_long_clickable: bool,
    /// `is_visible_to_user = 23`.
    #[prost(bool, tag = "23")]
    pub is_visible_to_user: bool,
    /// `depth = 27`.
    #[prost(int32, tag = "27")]
    pub depth: i32,
}

/// `ProtoRect { int32 left = 1; int32 top = 2; int32 right = 3; int32 bottom = 4; }` in screen pixels.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub(super) struct Rect {
    /// Left edge.
    #[prost(int32, tag = "1")]
    pub left: i32,
    /// Top edge.
    #[prost(int32, tag = "2")]
    pub top: i32,
    /// Right edge.
    #[prost(int32, tag = "3")]
    pub right: i32,
    /// Bottom edge.
    #[prost(int32, tag = "4")]
    pub bottom: i32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn int64_lists_decode_packed_and_unpacked() {
        // Field 1, wire type 2 (packed): [3, 300].
        let packed = [0x0a, 0x03, 0x03, 0xac, 0x02];
        assert_eq!(Int64List::decode(&packed[..]).unwrap().value, vec![3, 300]);
        // Field 1, wire type 0, twice.
        let unpacked = [0x08, 0x03, 0x08, 0xac, 0x02];
        assert_eq!(
            Int64List::decode(&unpacked[..]).unwrap().value,
            vec![3, 300]
        );
    }

    #[test]
    fn unknown_fields_are_skipped() {
        // A node with text (field 7, a string) and is_clickable (field 14): only the latter is read.
        let node = [0x3a, 0x02, b'o', b'k', 0x70, 0x01];
        let n = Node::decode(&node[..]).unwrap();
        assert!(n.is_clickable);
        assert!(n.bounds_in_screen.is_none());
    }
}
