//! What the sim says about itself, shaped like vLLM: `GET /version` (`{"version": ...}`) and
//! `GET /v1/models` (vLLM's `ModelList`, with `max_model_len`), so that canaryd can record the
//! server engine and its version, and tests can make "the engine was upgraded".

use std::sync::RwLock;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Deserialize;

use crate::profile::Profile;

pub(crate) struct Identity {
    model: String,
    /// `--max-model-len`, if given.
    max_model_len: Option<u64>,
    /// What `GET /version` reports; `POST /sim/version` changes it.
    version: RwLock<String>,
    /// Unix seconds at startup: `created` in `/v1/models`.
    created: u64,
}

impl Identity {
    pub fn new(model: &str, max_model_len: Option<u64>, version: String) -> Identity {
        Identity {
            model: model.to_owned(),
            max_model_len,
            version: RwLock::new(version),
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        }
    }

    /// The longest `prompt + max_tokens` accepted: `--max-model-len`, capped by the KV budget.
    pub fn max_model_len(&self, profile: &Profile) -> u64 {
        self.max_model_len
            .unwrap_or(profile.kv_budget_tokens)
            .min(profile.kv_budget_tokens)
    }

    /// The `GET /version` body.
    pub fn version(&self) -> Vec<u8> {
        let v = self.version.read().expect("version lock").clone();
        serde_json::json!({ "version": v }).to_string().into_bytes()
    }

    /// `POST /sim/version {"version": "..."}`: what `GET /version` reports from now on.
    pub fn set_version(&self, body: &[u8]) -> Result<Vec<u8>, String> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Body {
            version: String,
        }
        let b: Body = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        if b.version.trim().is_empty() || b.version.chars().any(char::is_control) {
            return Err("version must be non-empty, without control characters".into());
        }
        tracing::info!("canary-sim: engine version now {:?}", b.version);
        *self.version.write().expect("version lock") = b.version;
        Ok(self.version())
    }

    /// The `GET /v1/models` body (`owned_by` names the sim).
    pub fn models(&self, profile: &Profile) -> Vec<u8> {
        let permission = serde_json::json!({
            "id": format!("modelperm-canary-sim-{}", self.created),
            "object": "model_permission", "created": self.created,
            "allow_create_engine": false, "allow_sampling": true, "allow_logprobs": true,
            "allow_search_indices": false, "allow_view": true, "allow_fine_tuning": false,
            "organization": "*", "group": null, "is_blocking": false,
        });
        serde_json::json!({"object": "list", "data": [{
            "id": self.model, "object": "model", "created": self.created,
            "owned_by": "canary-sim", "root": self.model, "parent": null,
            "max_model_len": self.max_model_len(profile), "permission": [permission],
        }]})
        .to_string()
        .into_bytes()
    }
}
