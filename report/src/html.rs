//! The page shell: escaping, the Content-Security-Policy that keeps a report offline, and the
//! inline stylesheet.

/// Escapes text for HTML element content.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            _ => out.push(c),
        }
    }
    out
}

/// Escapes text for a double-quoted attribute value.
pub fn attr(s: &str) -> String {
    esc(s).replace('"', "&quot;").replace('\'', "&#39;")
}

/// Nothing may be fetched: no script, font, image or connection; only the inline styles
/// (the `<style>` element and the legend swatches' `style` attributes).
pub const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'";

const STYLE: &str = r#"
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;color:#222;background:#f6f7f9}
main{max-width:1200px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:22px;margin:8px 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:16px 0 6px}
p.lead{color:#555;margin:0 0 12px}p.note{color:#666;font-size:12px;margin:4px 6px}p.warn{color:#8a4b00;background:#fff4e0;padding:6px 8px;margin:0 0 10px}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(480px,1fr));gap:12px}
figure.chart{background:#fff;border:1px solid #e2e4e8;border-radius:6px;margin:0 0 12px;padding:8px}
figure.chart figcaption{font-size:13px;margin:0 4px 4px}
svg.plot{width:100%;height:auto;display:block}
.key{display:inline-block;margin-left:12px;color:#444;font-size:12px}
.key i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px;vertical-align:-1px}
table{border-collapse:collapse;background:#fff;font-size:13px;margin:4px 0 12px}
th,td{border:1px solid #e2e4e8;padding:4px 8px;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}
th{background:#f0f2f5;font-weight:600}
.kv td:first-child{color:#555;white-space:nowrap}
.tiles{display:flex;flex-wrap:wrap;gap:8px;margin:8px 0 12px}
.tile{background:#fff;border:1px solid #e2e4e8;border-radius:6px;padding:8px 12px;min-width:120px}
.tile b{display:block;font-size:20px}.tile span{color:#666;font-size:12px}
.regressed{color:#b3261e;font-weight:600}.improved{color:#1e7b34;font-weight:600}.steady{color:#555}
.insufficient{color:#999}.changed{color:#8a5a00}
.verdict{font-weight:600}.verdict.pass{color:#1e7b34}.verdict.fail,.verdict.error{color:#b3261e}.verdict.interrupted{color:#8a5a00}
.bottleneck{font-weight:600;padding:1px 6px;border-radius:4px;background:#f3e8f0;color:#6b3a5f}
.bottleneck.healthy{background:#e5f2e7;color:#1e7b34}.bottleneck.unknown{background:#eee;color:#555}
.diagnosis .headline{font-size:16px;margin:6px 0}.confidence{color:#555}.why{max-width:70em}
small.why{display:block;color:#666;font-size:12px}
.slot{border-left:4px solid #4e79a7;padding-left:10px}
details{background:#fff;border:1px solid #e2e4e8;border-radius:6px;padding:6px 10px;margin:8px 0}
summary{cursor:pointer;font-weight:600}
code{background:#eef0f3;padding:1px 4px;border-radius:3px}
h1,h2,h3,p,li,summary,figcaption,th,td,.tile,code{overflow-wrap:anywhere}
"#;

/// A whole page: `title`, then `body` (already HTML).
pub fn page(title: &str, kind: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"generator\" content=\"canaryd {}\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n\
         <body data-page=\"{}\">\n<main>\n{body}</main>\n</body>\n</html>\n",
        env!("CARGO_PKG_VERSION"),
        esc(title),
        attr(kind)
    )
}

/// A table: header cells, then rows of cells (already HTML). Cells whose text starts with a
/// digit or sign are right-aligned.
pub fn table(class: &str, head: &[&str], rows: &[Vec<String>]) -> String {
    let mut t = format!("<table class=\"{}\"><thead><tr>", attr(class));
    for h in head {
        t.push_str(&format!("<th>{}</th>", esc(h)));
    }
    t.push_str("</tr></thead><tbody>");
    for row in rows {
        t.push_str("<tr>");
        for cell in row {
            let numeric = cell
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit() || matches!(c, '−' | '+' | '-' | '≤'));
            if numeric {
                t.push_str(&format!("<td class=\"n\">{cell}</td>"));
            } else {
                t.push_str(&format!("<td>{cell}</td>"));
            }
        }
        t.push_str("</tr>");
    }
    t.push_str("</tbody></table>\n");
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes() {
        assert_eq!(esc("<a & b>"), "&lt;a &amp; b&gt;");
        assert_eq!(attr("\"x'"), "&quot;x&#39;");
    }

    #[test]
    fn the_page_forbids_every_fetch() {
        let p = page("t", "run", "<p>x</p>");
        assert!(p.contains("default-src 'none'"));
        assert!(!p.contains("<script"));
        assert!(!p.contains("http://") && !p.contains("https://"), "{p}");
    }
}
