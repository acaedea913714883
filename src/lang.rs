//! The languages of user-visible messages and the one language decision of a request
//! (`preferredLanguage`, else `Accept-Language`, else English).

/// The language of user-visible messages: the reference's seven. The order is the column order
/// of the catalogue (src/messages.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lang {
    #[default]
    En,
    Zh,
    Es,
    Fr,
    De,
    Ja,
    Pt,
}

impl Lang {
    /// Every language, in catalogue column order.
    pub(crate) const ALL: [Lang; 7] = [
        Lang::En,
        Lang::Zh,
        Lang::Es,
        Lang::Fr,
        Lang::De,
        Lang::Ja,
        Lang::Pt,
    ];

    /// The primary subtag: what the kernel gets as `preferredLanguage` when the client sent none.
    pub(crate) fn tag(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Zh => "zh",
            Lang::Es => "es",
            Lang::Fr => "fr",
            Lang::De => "de",
            Lang::Ja => "ja",
            Lang::Pt => "pt",
        }
    }

    /// The one language decision of a request: `preferredLanguage` when it normalises to a
    /// supported language, else `Accept-Language`, else English (the reference's order).
    pub(crate) fn choose(preferred: Option<&str>, accept_language: Option<&str>) -> Lang {
        preferred
            .and_then(Lang::normalize)
            .or_else(|| accept_language.map(Lang::from_accept_language))
            .unwrap_or_default()
    }

    /// Trim, lowercase, `_` → `-`, keep the primary subtag; `None` when it is not supported
    /// (`zh-CN` → zh, `pt_BR` → pt).
    pub(crate) fn normalize(tag: &str) -> Option<Lang> {
        let tag = tag.trim().to_ascii_lowercase().replace('_', "-");
        let primary = tag.split('-').next().unwrap_or("");
        Lang::ALL.into_iter().find(|l| l.tag() == primary)
    }

    /// `Accept-Language` as the reference reads it: the first `q=` of an item (a parse error is
    /// q=0); q ≤ 0, q > 1 and non-finite q skipped; `*` is the fallback (English); unsupported tags
    /// skipped; the highest q wins, the earliest item on a tie.
    fn from_accept_language(header: &str) -> Lang {
        let mut best: Option<(f64, Lang)> = None;
        for item in header.split(',') {
            let mut bits = item.split(';');
            let tag = bits.next().unwrap_or("").trim();
            let q = bits
                .find_map(|b| b.trim().strip_prefix("q="))
                .map_or(1.0, |q| q.trim().parse::<f64>().unwrap_or(0.0));
            if !q.is_finite() || q <= 0.0 || q > 1.0 {
                continue;
            }
            let lang = if tag == "*" {
                Some(Lang::default())
            } else {
                Lang::normalize(tag)
            };
            if let Some(lang) = lang {
                if best.is_none_or(|(b, _)| q > b) {
                    best = Some((q, lang));
                }
            }
        }
        best.map(|(_, l)| l).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preferred_language_beats_accept_language() {
        assert_eq!(Lang::choose(Some("zh-CN"), Some("en-US")), Lang::Zh);
        assert_eq!(Lang::choose(Some("en"), Some("zh")), Lang::En);
        assert_eq!(Lang::choose(Some("fr"), Some("zh")), Lang::Fr);
        assert_eq!(Lang::choose(Some(" PT_br "), None), Lang::Pt);
        assert_eq!(Lang::choose(Some("ko"), Some("ja")), Lang::Ja);
    }

    #[test]
    fn accept_language_respects_q_values() {
        assert_eq!(Lang::choose(None, Some("ko, en;q=0.5, zh;q=0.8")), Lang::Zh);
        assert_eq!(Lang::choose(None, Some("zh-TW;q=0, en")), Lang::En);
        assert_eq!(Lang::choose(None, Some("ja-JP, en;q=0.5")), Lang::Ja);
        assert_eq!(
            Lang::choose(None, Some("zh;q=0, en;q=0.2, ja;q=1")),
            Lang::Ja
        );
        assert_eq!(Lang::choose(None, None), Lang::En);
    }

    #[test]
    fn accept_language_skips_bad_q_values_and_keeps_the_earliest_tie() {
        assert_eq!(Lang::choose(None, Some("de;q=x, fr;q=0.1")), Lang::Fr);
        assert_eq!(
            Lang::choose(None, Some("de;q=1.5, es;q=NaN, fr;q=0.3")),
            Lang::Fr
        );
        assert_eq!(Lang::choose(None, Some("es;q=0.5, de;q=0.5")), Lang::Es);
        assert_eq!(Lang::choose(None, Some("*, zh;q=0.9")), Lang::En);
        assert_eq!(Lang::choose(None, Some("ko;q=1, pt-BR;q=0.1")), Lang::Pt);
    }
}
