//! Which of a target's values are secrets, for the scrub ([`Secrets`], canary-core's) that
//! takes them out of a server's words before they reach a record, a summary or an export: the
//! API key whole, and each extra header that carries a credential (by its name, or a scheme
//! word such as `Bearer`) with the credentials in it; other headers' values are no secrets.

use crate::target::{ApiKey, Target};
pub use canary_core::Secrets;
use canary_core::Words;

impl canary_core::HoldsSecrets for Target {
    fn add_secrets(&self, secrets: &mut Secrets) {
        for key in self.api_key.iter().map(ApiKey::expose) {
            secrets.add_secret(key.as_bytes());
        }
        // By their bytes: a value may hold any byte from 0x80 up (`-H 'X-Key: é'`). Only a
        // credential's value is a secret, and its words only in `Authorization`.
        for (name, value) in &self.headers {
            secrets.add_header(name.as_str(), value.as_bytes(), Words::OfCredentials);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::{header, Endpoint};

    fn secrets(headers: &[(&str, &str)]) -> Secrets {
        let mut t = Target::new("http://h:1", Endpoint::Chat, "m").unwrap();
        t.api_key = Some(ApiKey::new("sk-ZQ1xAPIKEY/k+y=1"));
        t.headers = headers.iter().map(|(n, v)| header(n, v).unwrap()).collect();
        Secrets::of([&t])
    }

    #[test]
    fn the_key_and_every_credential_header_value_are_secrets() {
        let s = secrets(&[
            ("x-tenant-token", "tenant-0123456789"),
            ("x-tenant", "tenant-42"),
        ]);
        assert_eq!(
            s.clean("Bearer sk-ZQ1xAPIKEY/k+y=1 for tenant-0123456789 of tenant-42")
                .as_ref(),
            "Bearer <redacted> for <redacted> of tenant-42"
        );
        assert!(!format!("{s:?}").contains("ZQ1x"));
    }

    // Rules the OTLP exporter's scrub had and the replay's lacked, now one scrub's: a server
    // quoting a header's credential without its scheme word (on any header, not only
    // `authorization`), the piece after a prefix (`token=`), a `Basic` credential in the
    // URL-safe alphabet, and a secret with every byte percent-encoded (`%41` for `A`).
    #[test]
    fn a_credential_quoted_without_its_scheme_prefix_or_with_every_byte_escaped_is_redacted() {
        let s = secrets(&[
            ("x-env", "Token ENVTOKecho-55"),
            ("x-api-key", "token=KEYspell99"),
            // `svc:PW?>?>x1` in the URL-safe alphabet (`-` and `_` for `+` and `/`).
            ("proxy-authorization", "Basic c3ZjOlBXPz4_Pngx"),
        ]);
        let every_byte: String = "sk-ZQ1xAPIKEY/k+y=1"
            .bytes()
            .map(|b| format!("%{b:02X}"))
            .collect();
        let text = format!(
            "bad credential ENVTOKecho-55; unknown key KEYspell99; login svc:PW?>?>x1; \
             key {every_byte}."
        );
        assert_eq!(
            s.clean(&text).as_ref(),
            "bad credential <redacted>; unknown key <redacted>; login <redacted>; key <redacted>."
        );
    }
}
