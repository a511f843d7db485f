//! Turns client and server errors into messages that name the server, the table and the
//! way out (docs/architecture.md §9), and the SQLSTATE codes the sink branches on.

use postgres::error::SqlState;

use super::config::PostgresSinkConfig;

/// A PostgreSQL error as one line: the server's message, detail, hint and SQLSTATE, or the
/// client's cause chain.
pub(crate) fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut s = format!("{} (SQLSTATE {})", db.message(), db.code().code());
            if let Some(d) = db.detail() {
                s.push_str("; ");
                s.push_str(d);
            }
            if let Some(h) = db.hint() {
                s.push_str("; hint: ");
                s.push_str(h);
            }
            s
        }
        None => {
            let mut s = e.to_string();
            let mut cause = std::error::Error::source(e);
            while let Some(c) = cause {
                let text = c.to_string();
                if !s.contains(&text) {
                    s.push_str(": ");
                    s.push_str(&text);
                }
                cause = c.source();
            }
            s
        }
    }
}

/// Whether `e` is the server's "undefined object" (42704): `COMMIT PREPARED` /
/// `ROLLBACK PREPARED` of a transaction name that no longer exists.
pub(crate) fn is_undefined_object(e: &postgres::Error) -> bool {
    e.code() == Some(&SqlState::UNDEFINED_OBJECT)
}

/// The error for a failed connection attempt, by cause: wrong credentials, a missing
/// database, or no server listening.
pub(crate) fn connect_error(config: &PostgresSinkConfig, e: &postgres::Error) -> weir::Error {
    let addr = config.address();
    let cause = describe(e);
    let code = e.code();
    let msg = if code == Some(&SqlState::INVALID_PASSWORD)
        || code == Some(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION)
        || (e.as_db_error().is_none() && cause.contains("password"))
    {
        format!(
            "PostgreSQL at {addr} rejected the login of user `{}`: {cause}; check the user \
             and password in the sink URL (postgres://user:password@host:port/db/table)",
            config.user
        )
    } else if code == Some(&SqlState::INVALID_CATALOG_NAME) {
        format!(
            "PostgreSQL at {addr} has no database `{}`: {cause}; create it \
             (`createdb {}`) or fix the database in the sink URL",
            config.database, config.database
        )
    } else if e.as_db_error().is_some() {
        format!("PostgreSQL at {addr} refused the connection: {cause}")
    } else {
        format!(
            "cannot connect to PostgreSQL at {addr}: {cause}; is the server running? Start \
             it, or check the host and port in the sink URL"
        )
    };
    weir::Error::User(msg)
}

/// Why `max_prepared_transactions = setting` cannot carry an exactly-once sink of
/// `parallelism` subtasks, if it cannot. PostgreSQL's default is 0, which turns
/// `PREPARE TRANSACTION` off.
pub fn check_max_prepared_transactions(setting: u32, parallelism: u32) -> Result<(), String> {
    if setting >= parallelism.max(1) {
        return Ok(());
    }
    Err(format!(
        "the PostgreSQL server has max_prepared_transactions = {setting}, too few for an \
         exactly-once sink of parallelism {parallelism}: each subtask keeps a prepared \
         transaction per checkpoint in flight. Set max_prepared_transactions to at least \
         {} (sink parallelism × (max concurrent checkpoints + 1)) in postgresql.conf and \
         restart the server, or use the at-least-once upsert mode (mode=upsert&key=<primary \
         key>) which needs no prepared transactions",
        parallelism.max(1) * 2
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_prepared_transactions_is_refused_with_the_way_out() {
        let e = check_max_prepared_transactions(0, 4).unwrap_err();
        assert!(e.contains("max_prepared_transactions = 0"), "{e}");
        assert!(e.contains("at least 8"), "{e}");
        assert!(e.contains("postgresql.conf"), "{e}");
        assert!(e.contains("mode=upsert"), "{e}");
        assert!(check_max_prepared_transactions(3, 4).is_err());
        assert!(check_max_prepared_transactions(20, 4).is_ok());
    }
}
