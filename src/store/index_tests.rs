//! The index's order and its paging while threads change, against a model that keeps every stamp.

use super::*;
use std::collections::BTreeMap;

/// An index holding `(key, user, stamp)` as found on disk, built.
fn index_of(found: &[(&str, &str, u64)]) -> ThreadIndex {
    let index = ThreadIndex::default();
    index.add_found(
        found
            .iter()
            .map(|(k, u, t)| (k.to_string(), format!("id-{k}"), u.to_string(), *t))
            .collect(),
    );
    index.mark_built();
    index
}

/// A live write of thread `key` of `user`: its stamp.
fn touch(index: &ThreadIndex, key: &str, user: &str) -> u64 {
    let stamp = index.begin_write();
    index.end_write(stamp, Some((key, &format!("id-{key}"), user)));
    stamp
}

fn keys(page: &Page) -> Vec<String> {
    page.rows.iter().map(|r| r.key.to_string()).collect()
}

/// Every page of a listing of `user`, `limit` at a time, with `between` run after each page.
fn all_pages(
    index: &ThreadIndex,
    user: &str,
    limit: usize,
    mut between: impl FnMut(usize),
) -> Vec<String> {
    let mut listed = Vec::new();
    let mut page = index.page(user, None, limit);
    for n in 0.. {
        listed.extend(keys(&page));
        between(n);
        let Some(next) = page.next else {
            break;
        };
        page = index.page(user, Some(&next), limit);
    }
    listed
}

const T0: u64 = 1_700_000_000_000;

#[test]
fn threads_are_listed_most_recently_active_first_then_by_key() {
    let index = index_of(&[
        ("a", "u", T0 + 1),
        ("b", "u", T0 + 3),
        ("c", "u", T0 + 2),
        ("d", "u", T0 + 3),
        ("x", "other", T0 + 9),
    ]);
    let page = index.page("u", None, 10);
    assert_eq!(keys(&page), ["b", "d", "c", "a"], "ties by key");
    assert!(page.next.is_none());
    assert_eq!(page.rows[0].thread_id, "id-b");
    assert_eq!(page.rows[0].updated, T0 + 3);
    assert!(index.page("nobody", None, 10).rows.is_empty());
    // A later write moves a thread to the top.
    touch(&index, "a", "u");
    assert_eq!(keys(&index.page("u", None, 10)), ["a", "b", "d", "c"]);
    assert_eq!(index.page("u", None, 10).rows[0].first, T0 + 1);
}

#[test]
fn pages_split_ties_exactly_and_the_last_page_has_no_cursor() {
    let found: Vec<(String, u64)> = (0..7).map(|i| (format!("t{i}"), T0)).collect();
    let found: Vec<(&str, &str, u64)> = found.iter().map(|(k, t)| (k.as_str(), "u", *t)).collect();
    let index = index_of(&found);
    let listed = all_pages(&index, "u", 3, |_| {});
    assert_eq!(listed, ["t0", "t1", "t2", "t3", "t4", "t5", "t6"]);
    let exact = all_pages(&index, "u", 7, |_| {});
    assert_eq!(exact.len(), 7);
    assert!(
        index.page("u", None, 7).next.is_none(),
        "no empty last page"
    );
}

#[test]
fn a_listing_keeps_its_snapshot_while_threads_change_between_pages() {
    let index = index_of(&[
        ("a", "u", T0 + 6),
        ("b", "u", T0 + 5),
        ("c", "u", T0 + 4),
        ("d", "u", T0 + 3),
        ("e", "u", T0 + 2),
        ("f", "u", T0 + 1),
    ]);
    let listed = all_pages(&index, "u", 2, |n| match n {
        // After page 1 (a, b): one of page 1 and one still to come become the newest, and a
        // thread is created; the listing goes on as it stood.
        0 => {
            touch(&index, "e", "u");
            touch(&index, "b", "u");
            touch(&index, "new", "u");
        }
        1 => {
            touch(&index, "f", "u");
        }
        _ => {}
    });
    assert_eq!(listed, ["a", "b", "c", "d", "e", "f"]);
    // A new listing sees the changes (written within a few milliseconds: their order among
    // themselves is their stamps', ties by key).
    let fresh = all_pages(&index, "u", 2, |_| {});
    let mut changed = fresh[..4].to_vec();
    changed.sort();
    assert_eq!(changed, ["b", "e", "f", "new"]);
    assert_eq!(fresh[4..], ["a", "c", "d"]);
}

#[test]
fn a_write_under_way_at_the_snapshot_is_after_it() {
    let index = index_of(&[("a", "u", T0 + 2), ("b", "u", T0 + 1)]);
    let stamp = index.begin_write();
    let page = index.page("u", None, 1);
    assert_eq!(keys(&page), ["a"]);
    // The write that was under way ends after page 1: a thread it created is not in this
    // listing, and one it moved keeps its place as of the snapshot.
    index.end_write(stamp, Some(("new", "id-new", "u")));
    touch(&index, "b", "u");
    let rest = index.page("u", page.next.as_ref(), 10);
    assert_eq!(keys(&rest), ["b"]);
    assert!(stamp > page.next.unwrap().snapshot);
}

#[test]
fn a_failed_or_userless_write_records_nothing() {
    let index = index_of(&[]);
    let stamp = index.begin_write();
    index.end_write(stamp, None);
    assert!(index.page("u", None, 10).rows.is_empty());
    assert!(index.inner.lock().writing.is_empty());
}

#[test]
fn headers_are_remembered_per_thread() {
    let index = index_of(&[("a", "u", T0)]);
    let header = Header {
        title: Some("Hello".into()),
        created_at: Some("2026-12-04T12:00:00.000Z".into()),
    };
    index.set_header("a", header.clone());
    index.set_header("unknown", header.clone());
    assert_eq!(index.page("u", None, 1).rows[0].header, Some(header));
}

#[test]
fn stamps_older_than_the_cursor_lifetime_are_pruned_but_the_newest_of_them_kept() {
    let now = ids::now_ms();
    let old = now - CURSOR_TTL - 10_000;
    let mut e = Entry {
        thread_id: "t".into(),
        user_id: "u".into(),
        stamps: Vec::new(),
        first: u64::MAX,
        header: None,
    };
    for t in [old - 2, old - 1, old, now - 5, now] {
        e.add(t, now);
    }
    assert_eq!(e.stamps, [old, now - 5, now]);
    assert_eq!(e.first, old - 2);
    assert_eq!(e.newest_by(now - 6), Some(old));
    assert_eq!(e.newest_by(old - 1), None);
    for t in 0..(MAX_STAMPS as u64 + 10) {
        e.add(now + 1 + t, now);
    }
    assert_eq!(e.stamps.len(), MAX_STAMPS);
}

#[test]
fn a_list_waits_for_the_start_up_scan_within_its_bound() {
    let index = Arc::new(ThreadIndex::default());
    assert!(!index.wait_built(Duration::from_millis(20)));
    let builder = index.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        builder.mark_built();
    });
    assert!(index.wait_built(Duration::from_secs(10)));
    t.join().unwrap();
}

/// A small deterministic generator (xorshift), enough to shuffle the operations.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The model: every stamp of every thread kept; a listing at `s` is the threads with a stamp by
/// `s`, ordered by their newest such stamp, then by key.
fn model_listing(model: &BTreeMap<String, (String, Vec<u64>)>, user: &str, s: u64) -> Vec<String> {
    let mut placed: Vec<(Reverse<u64>, String)> = model
        .iter()
        .filter(|(_, (u, _))| u == user)
        .filter_map(|(k, (_, stamps))| {
            let at = stamps.iter().filter(|&&t| t <= s).max()?;
            Some((Reverse(*at), k.clone()))
        })
        .collect();
    placed.sort();
    placed.into_iter().map(|(_, k)| k).collect()
}

#[test]
fn listings_equal_the_model_whatever_changes_between_pages() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let users = ["u1", "u2"];
    let mut model: BTreeMap<String, (String, Vec<u64>)> = BTreeMap::new();
    let mut found = Vec::new();
    for i in 0..60 {
        let (key, user) = (format!("t{i:02}"), users[i % 2].to_string());
        // Few distinct times: many ties.
        let stamp = T0 + rng.below(8);
        model.insert(key.clone(), (user.clone(), vec![stamp]));
        found.push((key, format!("id-t{i:02}"), user, stamp));
    }
    let index = ThreadIndex::default();
    index.add_found(found);
    index.mark_built();
    for round in 0..40 {
        let user = users[round % 2];
        let limit = 1 + rng.below(9) as usize;
        let mut listed = Vec::new();
        let mut page = index.page(user, None, limit);
        let s = loop {
            listed.extend(keys(&page));
            for _ in 0..rng.below(4) {
                let n = rng.below(70);
                let key = format!("t{n:02}");
                let owner = model
                    .get(&key)
                    .map_or(users[(n % 2) as usize].to_string(), |(u, _)| u.clone());
                let stamp = touch(&index, &key, &owner);
                model
                    .entry(key)
                    .or_insert((owner, Vec::new()))
                    .1
                    .push(stamp);
            }
            match page.next.clone() {
                Some(next) => page = index.page(user, Some(&next), limit),
                None => break index.inner.lock().high_water,
            }
        };
        // The listing's snapshot is the one its cursors carried; without a cursor (one page),
        // the last snapshot taken is that page's.
        let expected = model_listing(&model, user, s);
        assert_eq!(listed, expected, "round {round}, limit {limit}");
    }
}
