//! Where the PostgreSQL sink writes and how: parsed from a URL (the CLI's
//! `--sink postgres://…`) or built in code.
//!
//! ```text
//! postgres://user[:password]@host[:port]/database/table[?mode=exactly-once]
//! postgres://user[:password]@host[:port]/database?table=schema.table&mode=upsert&key=id
//! ```
//!
//! Query parameters: `table` (instead of the last path segment), `mode` (`exactly-once`,
//! the default, or `upsert`), `key` (comma-separated primary-key columns, required by
//! `upsert`), `connect_timeout` (seconds, default 10), `application_name`.

use std::fmt;
use std::time::Duration;

/// How the sink makes its output safe against replays after a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteMode {
    /// One transaction per checkpoint, `PREPARE TRANSACTION` when the checkpoint's barrier
    /// passes, `COMMIT PREPARED` when the checkpoint completes: every record lands exactly
    /// once and readers never see rows of an uncommitted checkpoint. Needs
    /// `max_prepared_transactions` > 0 on the server.
    ExactlyOnce,
    /// At-least-once writes made idempotent by the table's primary key:
    /// `INSERT … ON CONFLICT (key) DO UPDATE`, committed directly when the checkpoint's
    /// barrier passes. A replay after a failure writes the same rows again and overwrites
    /// them with the same values, so the table ends as if every record was written once —
    /// provided a record's row depends only on the record. Readers may see rows of a
    /// checkpoint that later fails (they are overwritten, never duplicated).
    Upsert {
        /// The conflict target: the table's primary key (or a unique index's) columns.
        key: Vec<String>,
    },
}

/// Connection and table settings of a [`PostgresSink`](super::PostgresSink).
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresSinkConfig {
    /// Server host name, IP address, or a Unix socket directory (starts with `/`).
    pub host: String,
    /// Server port.
    pub port: u16,
    /// Role to log in as.
    pub user: String,
    /// Password, if the server asks for one.
    pub password: Option<String>,
    /// Database name.
    pub database: String,
    /// Target table, optionally schema-qualified (`schema.table`); case-sensitive.
    pub table: String,
    /// Exactly-once (two-phase commit) or idempotent upserts.
    pub mode: WriteMode,
    /// How long connecting may take before the sink reports the server unreachable.
    pub connect_timeout: Duration,
    /// Shown in `pg_stat_activity`, to tell the sink's sessions apart.
    pub application_name: String,
}

impl fmt::Debug for PostgresSinkConfig {
    /// Like the derived one, with the password hidden (configs end up in logs).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresSinkConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("database", &self.database)
            .field("table", &self.table)
            .field("mode", &self.mode)
            .field("connect_timeout", &self.connect_timeout)
            .field("application_name", &self.application_name)
            .finish()
    }
}

impl PostgresSinkConfig {
    /// A config for `table` in `database` on `host:port` as `user`, exactly-once, without
    /// a password; adjust the public fields for the rest.
    pub fn new(host: &str, port: u16, user: &str, database: &str, table: &str) -> Self {
        PostgresSinkConfig {
            host: host.into(),
            port,
            user: user.into(),
            password: None,
            database: database.into(),
            table: table.into(),
            mode: WriteMode::ExactlyOnce,
            connect_timeout: Duration::from_secs(10),
            application_name: "weir".into(),
        }
    }

    /// Parses a `postgres://` URL (see the module docs); the error says what is wrong and
    /// shows the expected shape.
    pub fn parse(url: &str) -> Result<Self, String> {
        const SHAPE: &str = "expected postgres://user[:password]@host[:port]/database/table \
             or postgres://user@host/database?table=name[&mode=upsert&key=id]";
        let bad = |what: String| format!("invalid PostgreSQL sink URL `{url}`: {what}; {SHAPE}");
        let rest = url
            .strip_prefix("postgres://")
            .or_else(|| url.strip_prefix("postgresql://"))
            .ok_or_else(|| bad("it must start with postgres://".into()))?;
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            Some(u) => match u.split_once(':') {
                Some((u, p)) => (decode(u).map_err(&bad)?, Some(decode(p).map_err(&bad)?)),
                None => (decode(u).map_err(&bad)?, None),
            },
            None => ("postgres".to_string(), None),
        };
        let (host, port) = split_host_port(hostport).map_err(&bad)?;
        let mut segments = path.split('/').filter(|s| !s.is_empty());
        let database = decode(segments.next().unwrap_or("")).map_err(&bad)?;
        let mut table = segments.next().map(decode).transpose().map_err(&bad)?;
        if let Some(extra) = segments.next() {
            return Err(bad(format!("unexpected path segment `{extra}`")));
        }
        if database.is_empty() {
            return Err(bad("the database name is missing".into()));
        }
        let mut config = PostgresSinkConfig::new(&host, port, &user, &database, "");
        config.password = password;
        let mut mode = None;
        let mut key = None;
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = decode(v).map_err(&bad)?;
            match k {
                "table" => table = Some(v),
                "mode" => mode = Some(v),
                "key" => key = Some(v),
                "connect_timeout" => {
                    let secs: u64 = v.parse().map_err(|_| {
                        bad(format!("connect_timeout `{v}` is not a number of seconds"))
                    })?;
                    config.connect_timeout = Duration::from_secs(secs);
                }
                "application_name" => config.application_name = v,
                other => {
                    return Err(bad(format!(
                        "unknown parameter `{other}` (known: table, mode, key, \
                         connect_timeout, application_name)"
                    )))
                }
            }
        }
        config.table = table
            .filter(|t| !t.is_empty())
            .ok_or_else(|| bad("the table is missing".into()))?;
        let key: Vec<String> = key
            .iter()
            .flat_map(|k| k.split(','))
            .map(|c| c.trim().to_string())
            .filter(|c| !c.is_empty())
            .collect();
        config.mode = match mode.as_deref() {
            None | Some("exactly-once") | Some("exactly_once") => {
                if !key.is_empty() {
                    return Err(bad("`key` is only used with mode=upsert".into()));
                }
                WriteMode::ExactlyOnce
            }
            Some("upsert") => {
                if key.is_empty() {
                    return Err(bad(
                        "mode=upsert needs key=<primary key columns, comma-separated>".into(),
                    ));
                }
                WriteMode::Upsert { key }
            }
            Some(other) => {
                return Err(bad(format!(
                    "unknown mode `{other}` (known: exactly-once, upsert)"
                )))
            }
        };
        Ok(config)
    }

    /// `host:port` as people write it, for error messages.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The client library's connection settings.
    pub(crate) fn client_config(&self) -> postgres::Config {
        let mut c = postgres::Config::new();
        c.host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(&self.database)
            .connect_timeout(self.connect_timeout)
            .application_name(&self.application_name);
        if let Some(p) = &self.password {
            c.password(p);
        }
        c
    }
}

fn split_host_port(s: &str) -> Result<(String, u16), String> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest
            .split_once(']')
            .ok_or_else(|| "unclosed `[` in the host".to_string())?;
        (h.to_string(), after.strip_prefix(':'))
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (s.to_string(), None),
        }
    };
    let host = if host.is_empty() {
        "localhost".to_string()
    } else {
        decode(&host)?
    };
    let port = match port {
        Some(p) => p
            .parse()
            .map_err(|_| format!("port `{p}` is not a number from 1 to 65535"))?,
        None => 5432,
    };
    Ok((host, port))
}

/// Percent-decoding (`%40` → `@`), for passwords and names with reserved characters.
fn decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent-escape in `{s}`"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("`{s}` does not decode to UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_table_in_path_and_in_query() {
        let c =
            PostgresSinkConfig::parse("postgres://bob:p%40ss@127.0.0.1:5433/shop/orders").unwrap();
        assert_eq!(
            (
                c.host.as_str(),
                c.port,
                c.user.as_str(),
                c.password.as_deref()
            ),
            ("127.0.0.1", 5433, "bob", Some("p@ss"))
        );
        assert_eq!((c.database.as_str(), c.table.as_str()), ("shop", "orders"));
        assert_eq!(c.mode, WriteMode::ExactlyOnce);
        let c = PostgresSinkConfig::parse(
            "postgresql://u@db.example/shop?table=s.t&mode=upsert&key=a,b&connect_timeout=3",
        )
        .unwrap();
        assert_eq!((c.port, c.table.as_str()), (5432, "s.t"));
        assert_eq!(
            c.mode,
            WriteMode::Upsert {
                key: vec!["a".into(), "b".into()]
            }
        );
        assert_eq!(c.connect_timeout, Duration::from_secs(3));
        assert!(!format!("{c:?}").contains("p@ss"));
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        for (url, says) in [
            ("mysql://u@h/db/t", "must start with postgres://"),
            ("postgres://u@h/db", "table is missing"),
            ("postgres://u@h/", "database name is missing"),
            ("postgres://u@h:99999/db/t", "port `99999`"),
            ("postgres://u@h/db/t?mode=fast", "unknown mode `fast`"),
            ("postgres://u@h/db/t?mode=upsert", "needs key="),
            (
                "postgres://u@h/db/t?colour=red",
                "unknown parameter `colour`",
            ),
            ("postgres://u@h/db/t/x", "unexpected path segment `x`"),
        ] {
            let e = PostgresSinkConfig::parse(url).unwrap_err();
            assert!(e.contains(says), "{url}: {e}");
            assert!(e.contains(url), "{url}: {e}");
        }
    }
}
