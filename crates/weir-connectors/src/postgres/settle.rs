//! Settling a sink's prepared transactions from outside any job, for `weir transactions
//! list|settle`: a job abandoned between pre-commit and commit leaves `PREPARE`d
//! transactions holding rows (and locks) until someone commits or rolls them back.

use postgres::{Client, NoTls};
use weir::Result;

use super::config::PostgresSinkConfig;
use super::error::{connect_error, describe, is_undefined_object};
use super::quote_literal;

/// A connection to the database a PostgreSQL sink writes into, for listing and settling
/// its prepared transactions (the same statements the sink's own recovery runs).
pub struct PreparedTransactions {
    config: PostgresSinkConfig,
    client: Client,
}

/// What settling one prepared transaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// It was open and is now committed or rolled back.
    Done,
    /// It no longer existed (SQLSTATE 42704): settled before, by a restart or an earlier
    /// run of the tool. Nothing was done, so nothing happens twice.
    AlreadyGone,
}

impl PreparedTransactions {
    /// Connects to the server and database of `config` (its table is not used); the error
    /// names the server and the way out when it is down or refuses the login.
    pub fn connect(config: &PostgresSinkConfig) -> Result<Self> {
        let client = config
            .client_config()
            .connect(NoTls)
            .map_err(|e| connect_error(config, &e))?;
        Ok(PreparedTransactions {
            config: config.clone(),
            client,
        })
    }

    /// The names of every prepared transaction in this database, sorted.
    pub fn list(&mut self) -> Result<Vec<String>> {
        let rows = self
            .client
            .query(
                "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() \
                 ORDER BY gid",
                &[],
            )
            .map_err(|e| self.err("cannot list prepared transactions", &e))?;
        Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect())
    }

    /// `COMMIT PREPARED` (`commit`) or `ROLLBACK PREPARED` of `gid`; a name that no
    /// longer exists is [`Settled::AlreadyGone`], so running this twice is harmless.
    pub fn settle(&mut self, gid: &str, commit: bool) -> Result<Settled> {
        let verb = if commit { "COMMIT" } else { "ROLLBACK" };
        let sql = format!("{verb} PREPARED {}", quote_literal(gid));
        match self.client.batch_execute(&sql) {
            Ok(()) => Ok(Settled::Done),
            Err(e) if is_undefined_object(&e) => Ok(Settled::AlreadyGone),
            Err(e) => Err(self.err(&format!("{verb} PREPARED '{gid}' failed"), &e)),
        }
    }

    fn err(&self, what: &str, e: &postgres::Error) -> weir::Error {
        weir::Error::User(format!(
            "PostgreSQL at {} (database `{}`): {what}: {}",
            self.config.address(),
            self.config.database,
            describe(e)
        ))
    }
}
