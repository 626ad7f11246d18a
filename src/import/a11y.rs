//! The gold box of an AndroidControl click: the accessibility-tree element under the point.
//!
//! Rule (ours; AndroidControl publishes none): among the nodes visible to the user whose screen bounds contain the
//! point (edges included), take those of the front-most window (greatest `layer`) that has any; prefer the
//! interactive ones (clickable, long-clickable or editable — the nodes a tap acts on); of those, the smallest
//! area, then the greatest depth. Where no node of the forest is flagged visible (data from an android_env that did
//! not fill the flag) every node counts as visible.

use prost::Message;

use super::proto::{Forest, Node, Rect};
use crate::dataset::BBox;

/// The forest decoded, or `None` when the bytes are not an `AndroidAccessibilityForest`.
pub(super) fn decode(bytes: &[u8]) -> Option<Forest> {
    Forest::decode(bytes).ok()
}

fn contains(r: &Rect, x: f64, y: f64) -> bool {
    r.right > r.left
        && r.bottom > r.top
        && (r.left as f64) <= x
        && x <= r.right as f64
        && (r.top as f64) <= y
        && y <= r.bottom as f64
}

fn area(r: &Rect) -> i64 {
    (r.right as i64 - r.left as i64) * (r.bottom as i64 - r.top as i64)
}

/// The box `[left, top, right, bottom]` of the element under `point`, if any node contains it.
pub(super) fn element_box(forest: &Forest, point: [f64; 2]) -> Option<BBox> {
    let [x, y] = point;
    let any_visible = forest
        .windows
        .iter()
        .flat_map(|w| w.tree.iter().flat_map(|t| &t.nodes))
        .any(|n| n.is_visible_to_user);
    let mut best: Option<(i32, &Node)> = None; // (window layer, node)
    for w in &forest.windows {
        let Some(tree) = &w.tree else { continue };
        for n in &tree.nodes {
            let Some(r) = &n.bounds_in_screen else {
                continue;
            };
            if (any_visible && !n.is_visible_to_user) || !contains(r, x, y) {
                continue;
            }
            if best.is_none_or(|(layer, b)| better(w.layer, n, layer, b)) {
                best = Some((w.layer, n));
            }
        }
    }
    let r = best?.1.bounds_in_screen?;
    Some([r.left as f64, r.top as f64, r.right as f64, r.bottom as f64])
}

fn interactive(n: &Node) -> bool {
    n.is_clickable || n.is_long_clickable || n.is_editable
}

/// Whether node `n` of a window at `layer` beats the current best `b` of a window at `b_layer`.
fn better(layer: i32, n: &Node, b_layer: i32, b: &Node) -> bool {
    if layer != b_layer {
        return layer > b_layer;
    }
    if interactive(n) != interactive(b) {
        return interactive(n);
    }
    let (an, ab) = (
        n.bounds_in_screen.as_ref().map_or(i64::MAX, area),
        b.bounds_in_screen.as_ref().map_or(i64::MAX, area),
    );
    if an != ab {
        return an < ab;
    }
    n.depth > b.depth
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::import::proto::{Tree, Window};

    pub fn node(b: [i32; 4], clickable: bool, depth: i32) -> Node {
        Node {
            unique_id: depth,
            bounds_in_screen: Some(Rect {
                left: b[0],
                top: b[1],
                right: b[2],
                bottom: b[3],
            }),
            is_clickable: clickable,
            is_editable: false,
            is_long_clickable: false,
            is_visible_to_user: true,
            depth,
        }
    }

    pub fn window(layer: i32, nodes: Vec<Node>) -> Window {
        Window {
            bounds_in_screen: None,
            layer,
            window_type: 1,
            tree: Some(Tree { nodes }),
        }
    }

    #[test]
    fn the_smallest_interactive_node_of_the_front_window_wins() {
        let app = window(
            1,
            vec![
                node([0, 0, 1080, 2400], false, 0),
                node([100, 100, 500, 300], true, 1),
                node([120, 120, 300, 200], false, 2), // a label inside the button: not interactive
            ],
        );
        let forest = Forest {
            windows: vec![app.clone()],
        };
        assert_eq!(
            element_box(&forest, [150.0, 150.0]),
            Some([100.0, 100.0, 500.0, 300.0])
        );
        // Outside the button: the smallest node that contains the point.
        assert_eq!(
            element_box(&forest, [700.0, 700.0]),
            Some([0.0, 0.0, 1080.0, 2400.0])
        );
        // A keyboard window in front covers the point.
        let ime = window(5, vec![node([0, 100, 1080, 400], false, 0)]);
        let forest = Forest {
            windows: vec![app, ime],
        };
        assert_eq!(
            element_box(&forest, [150.0, 150.0]),
            Some([0.0, 100.0, 1080.0, 400.0])
        );
        assert_eq!(element_box(&forest, [5000.0, 150.0]), None);
    }

    #[test]
    fn invisible_nodes_are_ignored_unless_no_node_is_flagged() {
        let mut hidden = node([100, 100, 200, 200], true, 1);
        hidden.is_visible_to_user = false;
        let forest = Forest {
            windows: vec![window(
                1,
                vec![node([0, 0, 1080, 2400], false, 0), hidden.clone()],
            )],
        };
        assert_eq!(
            element_box(&forest, [150.0, 150.0]),
            Some([0.0, 0.0, 1080.0, 2400.0])
        );
        let forest = Forest {
            windows: vec![window(1, vec![hidden])],
        };
        assert_eq!(
            element_box(&forest, [150.0, 150.0]),
            Some([100.0, 100.0, 200.0, 200.0])
        );
    }
}
