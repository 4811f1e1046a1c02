//! `ssl.principal.mapping.rules`: how a client certificate's distinguished name becomes a
//! principal name, as Kafka's `SslPrincipalMapper` reads them. Rules are tried in order; the
//! first that matches names the principal:
//!
//! - `DEFAULT` — the distinguished name itself (RFC 2253, `CN=client,OU=eng,O=acme,C=US`);
//! - `RULE:pattern/replacement/[L|U]` — if `pattern` matches the whole name, the name with
//!   every match replaced (`$1` back references), lower- or upper-cased by `L` / `U`.
//!
//! A name that no rule matches has no principal: the connection is refused.

use regex::Regex;

#[derive(Debug, Clone)]
pub enum Rule {
    Default,
    Replace {
        /// The pattern anchored at both ends: whether the rule applies.
        whole: Regex,
        /// The pattern as written: what `replacement` replaces.
        pattern: Regex,
        replacement: String,
        case: Case,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    Keep,
    Lower,
    Upper,
}

/// Parses the rule list; the error is a phrase saying which rule is wrong and why.
pub fn parse(rules: &str) -> Result<Vec<Rule>, String> {
    let mut out = Vec::new();
    let mut rest = rules.trim();
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("DEFAULT") {
            out.push(Rule::Default);
            rest = after;
        } else if let Some(after) = rest.strip_prefix("RULE:") {
            let (pattern, after) = until_unescaped_slash(after).ok_or_else(|| {
                format!("rule {rest:?} has no / after its pattern; write RULE:pattern/replacement/[LU]")
            })?;
            let (replacement, after) = until_unescaped_slash(after).ok_or_else(|| {
                format!("rule {rest:?} has no / after its replacement; write RULE:pattern/replacement/[LU]")
            })?;
            let (case, after) = match after.chars().next() {
                Some('L') => (Case::Lower, &after[1..]),
                Some('U') => (Case::Upper, &after[1..]),
                _ => (Case::Keep, after),
            };
            // Anchored, as Kafka matches the whole name (`Matcher.matches`).
            let anchored = format!("^(?:{pattern})$");
            let bad = |e: regex::Error| format!("rule pattern {pattern:?} is not a regular expression: {e}");
            let whole = Regex::new(&anchored).map_err(bad)?;
            let unanchored = Regex::new(pattern).map_err(bad)?;
            out.push(Rule::Replace {
                replacement: java_replacement(replacement, unanchored.captures_len() - 1),
                whole,
                pattern: unanchored,
                case,
            });
            rest = after;
        } else {
            let end = rest.find(',').unwrap_or(rest.len());
            return Err(format!(
                "{:?} is not a rule; write DEFAULT or RULE:pattern/replacement/[LU], separated by commas",
                &rest[..end]
            ));
        }
        rest = rest.trim_start();
        match rest.strip_prefix(',') {
            Some(after) => rest = after.trim_start(),
            None if rest.is_empty() => {}
            None => return Err(format!("expected a comma before {rest:?}")),
        }
    }
    Ok(out)
}

/// The part before the next `/` not escaped by `\`, and what follows that `/`.
fn until_unescaped_slash(s: &str) -> Option<(&str, &str)> {
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            '/' if !escaped => return Some((&s[..i], &s[i + 1..])),
            _ => escaped = false,
        }
    }
    None
}

/// Java's `$N` back references written as `${N}` (Rust would read `$1x` as a group named
/// `1x`); a reference past the pattern's groups stays literal text, as Kafka treats it.
fn java_replacement(replacement: &str, groups: usize) -> String {
    let mut out = String::with_capacity(replacement.len() + 8);
    let mut chars = replacement.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        let mut digits = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            digits.push(*d);
            chars.next();
        }
        // The longest prefix of the digits naming an existing group, as Java does.
        let mut n = digits.len();
        while n > 0 && digits[..n].parse::<usize>().map_or(true, |g| g > groups) {
            n -= 1;
        }
        if n == 0 {
            out.push_str("$$");
            out.push_str(&digits);
        } else {
            out.push_str(&format!("${{{}}}", &digits[..n]));
            out.push_str(&digits[n..]);
        }
    }
    out
}

/// The principal name for a distinguished name, or `None` when no rule applies.
pub fn apply(rules: &[Rule], distinguished_name: &str) -> Option<String> {
    rules.iter().find_map(|rule| match rule {
        Rule::Default => Some(distinguished_name.to_string()),
        Rule::Replace {
            whole,
            pattern,
            replacement,
            case,
        } => {
            if !whole.is_match(distinguished_name) {
                return None;
            }
            let name = pattern
                .replace_all(distinguished_name, replacement.as_str())
                .into_owned();
            Some(match case {
                Case::Keep => name,
                Case::Lower => name.to_lowercase(),
                Case::Upper => name.to_uppercase(),
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(rules: &str, dn: &str) -> Option<String> {
        apply(&parse(rules).unwrap(), dn)
    }

    #[test]
    fn default_keeps_the_distinguished_name() {
        assert_eq!(map("DEFAULT", "CN=alice,O=acme").as_deref(), Some("CN=alice,O=acme"));
    }

    #[test]
    fn rules_as_kafkas_documentation_writes_them() {
        let rules = "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,DEFAULT";
        assert_eq!(
            map(rules, "CN=kafka-svc,OU=ServiceUsers,O=Unknown").as_deref(),
            Some("kafka-svc")
        );
        assert_eq!(
            map(rules, "CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Palo Alto,ST=CA,C=US").as_deref(),
            Some("duke@javasoft")
        );
        assert_eq!(map(rules, "OU=x,cn=host.example").as_deref(), Some("HOST.EXAMPLE"));
        assert_eq!(map(rules, "O=nothing").as_deref(), Some("O=nothing"));
    }

    #[test]
    fn a_name_no_rule_matches_has_no_principal() {
        assert_eq!(map("RULE:^CN=(.*)$/$1/", "O=acme"), None);
    }

    #[test]
    fn back_references_past_the_groups_stay_literal() {
        assert_eq!(map("RULE:^CN=(.*)$/$1_$2/", "CN=a").as_deref(), Some("a_$2"));
    }

    #[test]
    fn malformed_rules_are_refused_with_a_reason() {
        assert!(parse("RULE:^CN=(.*)$").unwrap_err().contains("no /"));
        assert!(parse("RULE:^CN=(.*$/$1/")
            .unwrap_err()
            .contains("not a regular expression"));
        assert!(parse("SOMETHING").unwrap_err().contains("not a rule"));
        assert!(parse("DEFAULT DEFAULT").unwrap_err().contains("comma"));
    }
}
