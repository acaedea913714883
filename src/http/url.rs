//! URL decoding: `%XX` escapes of a path segment or query, and one parameter of a query string.

/// One `key=value` of a query string, percent-decoded; `None` when absent or empty.
pub(super) fn query_param(query: &str, key: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
        .find(|(k, _)| percent_decode(k).as_deref() == Some(key))
        .and_then(|(_, v)| percent_decode(&v.replace('+', " ")))
        .filter(|v| !v.is_empty())
}

/// `%XX` decoding of a URL component; `None` when it is not valid UTF-8 or a `%` is malformed.
pub(super) fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters_are_percent_decoded() {
        let q = "userId=alice%40example.com&rosInvocationId=inv+1&empty=";
        assert_eq!(
            query_param(q, "userId").as_deref(),
            Some("alice@example.com")
        );
        assert_eq!(query_param(q, "rosInvocationId").as_deref(), Some("inv 1"));
        assert_eq!(query_param(q, "empty"), None);
        assert_eq!(query_param(q, "missing"), None);
        assert_eq!(percent_decode("%E4%BD%A0").as_deref(), Some("你"));
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%4"), None);
    }
}
