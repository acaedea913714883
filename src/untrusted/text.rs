//! A client's `Last-Event-ID` and `Accept-Language`, and the `--config` file.

use crate::error::Lang;
use crate::stream::cursor;

/// `Last-Event-ID`: a cursor this process accepts formats back to itself (one position, one
/// spelling), whatever follows this process's epoch.
pub fn check_cursor(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for s in [text.to_string(), format!("{}.{text}", cursor::epoch())] {
        if let Some((tag, seq)) = cursor::parse(&s) {
            assert_eq!(cursor::format(&tag, seq, None), s.trim(), "{s:?}");
        }
    }
}

/// `Accept-Language` (and `preferredLanguage` before it): English or a language one of the
/// header's items names; a supported `preferredLanguage` always wins.
pub fn check_accept_language(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (preferred, header) = text.split_once('\n').unwrap_or(("", &text));
    let lang = Lang::choose(None, Some(header));
    let named = header
        .split(',')
        .filter_map(|item| Lang::normalize(item.split(';').next().unwrap_or("")));
    assert!(
        lang == Lang::En || named.clone().any(|l| l == lang),
        "{header:?}"
    );
    let with = Lang::choose(Some(preferred), Some(header));
    assert_eq!(with, Lang::normalize(preferred).unwrap_or(lang));
}

/// The `--config` YAML subset: a file that parses builds a configuration, the same twice, and the
/// keys and values it read, written back as YAML, read back the same.
pub fn check_yaml_config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(map) = crate::config::yaml_map(&text) else {
        return;
    };
    let config = crate::config::yaml_config(&map);
    let again = crate::config::yaml_config(&map);
    assert_eq!(format!("{config:?}"), format!("{again:?}"));
    let mut written = String::new();
    for (key, value) in &map {
        written.push_str(&format!("{key}: \"{value}\"\n"));
    }
    let back = crate::config::yaml_map(&written).expect("written back");
    assert_eq!(map, back, "{written}");
    assert_eq!(
        format!("{config:?}"),
        format!("{:?}", crate::config::yaml_config(&back))
    );
}
