//! The `macp` commands people run (`timeline`, `search`, `decisions`, `decide`) against a
//! running server instead of the local database: `--server URL` with the user's `--token`,
//! through the web view's API (`/api/`), so they work against a team server with
//! authentication. Acts made this way are recorded with the `web` channel, as in the page.

use serde_json::Value;

/// Where the commands go when `--server` is given.
#[derive(Debug, Clone, clap::Args)]
pub struct RemoteArgs {
    /// A running `macp serve` to talk to (its base URL, e.g. `https://macp.example.com`) instead
    /// of the local database.
    #[arg(long, env = "MACP_SERVER")]
    pub server: Option<String>,
    /// Your bearer token for that server (when it has authentication on).
    #[arg(long, env = "MACP_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// A client of a server's `/api/`.
#[derive(Debug, Clone)]
pub struct Remote {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Remote {
    /// The client `args` ask for, if they name a server.
    pub fn from_args(args: &RemoteArgs) -> Option<Self> {
        let base = args.server.as_deref()?.trim_end_matches('/').trim_end_matches("/mcp").to_owned();
        Some(Self { base, token: args.token.clone(), http: reqwest::Client::new() })
    }

    /// `GET /api/{path}?{query}` as JSON.
    pub async fn get(&self, path: &str, query: &[(&str, &str)]) -> Result<Value, String> {
        self.send(self.http.get(format!("{}/api/{path}", self.base)).query(query)).await
    }

    /// `POST /api/{path}` with a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, String> {
        let req = self
            .http
            .post(format!("{}/api/{path}", self.base))
            .header(crate::web::CSRF_HEADER, "1")
            .json(body);
        self.send(req).await
    }

    async fn send(&self, mut req: reqwest::RequestBuilder) -> Result<Value, String> {
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.map_err(|e| format!("{}: {e}", self.base))?;
        let status = resp.status();
        let body: Value = resp.json().await.map_err(|e| format!("{}: answered {status}: {e}", self.base))?;
        if status.is_success() {
            return Ok(body);
        }
        // MACP's own `{"error": {code, message}}`, or an OAuth refusal `{"error", "error_description"}`.
        let e = &body["error"];
        let (code, message) = match e.as_str() {
            Some(oauth) => (oauth, body["error_description"].as_str()),
            None => (e["code"].as_str().unwrap_or(status.as_str()), e["message"].as_str()),
        };
        let hint = if status == reqwest::StatusCode::UNAUTHORIZED {
            " (unauthenticated: pass --token or MACP_TOKEN)"
        } else {
            ""
        };
        Err(format!("{code}: {}{hint}", message.unwrap_or("the server refused the request")))
    }
}
