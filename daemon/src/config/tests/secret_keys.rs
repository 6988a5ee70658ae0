//! A value of the wrong type under a key that holds or names a secret is never quoted back,
//! whatever its type: a key pasted as a number is as secret as one pasted as a string.

use super::{error_at, GOOD};

#[test]
fn a_number_where_a_secrets_name_or_file_belongs_is_not_quoted() {
    for (from, to, key) in [
        (
            "api_key_env = \"MY_KEY\"",
            "api_key_env = 123456789012345678",
            "targets.local.api_key_env: invalid type: integer (not shown), expected a string",
        ),
        (
            "api_key_env = \"MY_KEY\"",
            "api_key_file = 1234567.5",
            "targets.local.api_key_file: invalid type: floating point (not shown)",
        ),
    ] {
        let text = GOOD.replace(from, to);
        let e = error_at(&text, to.split(' ').next().unwrap(), key);
        assert!(!e.contains("1234567"), "{e}");
    }
}
