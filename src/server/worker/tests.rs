use super::engine::TrimAfterBurst;

#[test]
fn memory_is_trimmed_once_a_burst_has_halved() {
    let mut t = TrimAfterBurst::default();
    // A small, steady load never trims; its last connection gone, it does.
    assert!((0..100).all(|k| !t.due(1 + k % 20)));
    assert!(t.due(0));
    assert!(!t.due(0));
    assert!(!t.due(200));
    assert!(!t.due(150));
    assert!(t.due(100));
    // Measured from what is left: the next trim needs another halving of a burst.
    assert!(!t.due(80));
    assert!(t.due(0));
    assert!(!t.due(0));
}
