//! PostgreSQL sink: exactly-once through `PREPARE TRANSACTION` (two-phase commit), or
//! at-least-once idempotent upserts.
//!
//! Add it to a job wrapped in the engine's adapter:
//!
//! ```no_run
//! # use weir::prelude::*;
//! # use weir_connectors::postgres::{PostgresSink, PostgresSinkConfig, SqlValue};
//! # fn job(stream: DataStream<(u64, u64)>) -> Result<(), String> {
//! let config = PostgresSinkConfig::parse("postgres://weir@127.0.0.1:5432/shop/counts")?;
//! let sink = PostgresSink::new(config, &["key", "seq"], |r: &(u64, u64)| {
//!     Ok(vec![SqlValue::BigInt(r.0 as i64), SqlValue::BigInt(r.1 as i64)])
//! });
//! stream.add_sink("pg", TwoPhaseCommit::new(sink)).uid("pg");
//! # Ok(()) }
//! ```
//!
//! **Exactly-once** ([`WriteMode::ExactlyOnce`]): each subtask writes the records between
//! two checkpoint barriers into one database transaction (binary `COPY`, one per batch).
//! When barrier `n` passes, the transaction is prepared as
//! `PREPARE TRANSACTION '<job>-<uid>-<subtask>-<n>'`: durable, holding its rows, invisible
//! to readers. When checkpoint `n` completes, `COMMIT PREPARED` makes the rows visible.
//! On restore, subtask 0 commits the prepared transactions the restored checkpoint lists
//! and rolls back every other prepared transaction of this sink in the database
//! (`pg_prepared_xacts`), whose records the sources replay. `COMMIT PREPARED` of a name
//! that no longer exists (SQLSTATE 42704) counts as done: only this sink settles its own
//! names, and it rolls back only names that no completed checkpoint lists, so a listed
//! name that is gone was committed.
//!
//! Commits and recovery run on a second connection per subtask: the data connection is
//! usually inside the next checkpoint's transaction, where `COMMIT PREPARED` is not
//! allowed. The server needs `max_prepared_transactions` ≥ sink parallelism × (max
//! concurrent checkpoints + 1); [`PostgresSink`] checks it when it opens.
//!
//! **Upsert** ([`WriteMode::Upsert`]): `INSERT … ON CONFLICT (key) DO UPDATE`, committed
//! when the barrier passes. A failure replays records since the last checkpoint and
//! overwrites their rows with the same values: duplicates never appear, and no prepared
//! transactions are needed.

mod config;
mod error;
mod settle;
mod value;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::{ToSql, Type};
use postgres::{Client, NoTls, Statement};
use serde::{Deserialize, Serialize};
use weir::api::two_phase_commit::{TransactionContext, TwoPhaseCommitSink};
use weir::{Error, Result};

pub use config::{PostgresSinkConfig, WriteMode};
pub use error::check_max_prepared_transactions;
pub use settle::{PreparedTransactions, Settled};
pub use value::SqlValue;

use error::{connect_error, describe, is_undefined_object};

/// PostgreSQL limits a prepared transaction's name to 199 bytes.
const MAX_GID_BYTES: usize = 199;
/// Upper bound on rows per multi-row `INSERT` (a statement takes at most 65535 parameters).
const UPSERT_ROWS: usize = 1000;

/// Maps a record to its row's values, in the order of the sink's columns; an `Err` names
/// what did not convert.
pub type RowMapping<T> = dyn Fn(&T) -> std::result::Result<Vec<SqlValue>, String> + Send + Sync;

/// Writes records into a PostgreSQL table, exactly-once or as idempotent upserts (see the
/// module docs). Use it through [`weir::api::two_phase_commit::TwoPhaseCommit`].
pub struct PostgresSink<T> {
    config: PostgresSinkConfig,
    columns: Arc<[String]>,
    mapping: Arc<RowMapping<T>>,
    conn: Option<Connected>,
}

/// What an open sink holds: its connections and the statements prepared on them.
struct Connected {
    /// Carries the open transaction's writes.
    data: Client,
    /// Commits and recovery, opened on first use (see the module docs).
    control: Option<Client>,
    /// The target columns' types, in the sink's column order.
    types: Vec<Type>,
    /// `COPY … FROM STDIN (FORMAT binary)` (exactly-once) or the full-size multi-row upsert.
    statement: Statement,
    /// Whether the data connection is inside `BEGIN`.
    in_transaction: bool,
}

/// The open transaction of a subtask: the rows it holds so far (the data live on the
/// sink's data connection).
#[derive(Debug)]
pub struct PgTransaction {
    rows: u64,
}

/// A prepared transaction awaiting `COMMIT PREPARED`; kept in checkpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreparedTransaction {
    /// The name it was prepared under (`<job>-<uid>-<subtask>-<checkpoint>`).
    pub gid: String,
    /// Rows it holds (for logs and tests).
    pub rows: u64,
}

impl<T> Clone for PostgresSink<T> {
    /// An unconnected copy: every subtask opens its own connections.
    fn clone(&self) -> Self {
        PostgresSink {
            config: self.config.clone(),
            columns: self.columns.clone(),
            mapping: self.mapping.clone(),
            conn: None,
        }
    }
}

impl<T> PostgresSink<T> {
    /// A sink writing `columns` of `config.table`; `mapping` turns a record into the values
    /// of those columns, in order. Nothing connects until the job opens the sink.
    pub fn new<F>(config: PostgresSinkConfig, columns: &[&str], mapping: F) -> Self
    where
        F: Fn(&T) -> std::result::Result<Vec<SqlValue>, String> + Send + Sync + 'static,
    {
        PostgresSink {
            config,
            columns: columns.iter().map(|c| c.to_string()).collect(),
            mapping: Arc::new(mapping),
            conn: None,
        }
    }

    /// The sink's settings.
    pub fn config(&self) -> &PostgresSinkConfig {
        &self.config
    }

    fn err(&self, what: &str, e: &postgres::Error) -> Error {
        Error::User(format!(
            "PostgreSQL sink (table `{}` at {}): {what}: {}",
            self.config.table,
            self.config.address(),
            describe(e)
        ))
    }

    fn connect(&self) -> Result<Client> {
        self.config
            .client_config()
            .connect(NoTls)
            .map_err(|e| connect_error(&self.config, &e))
    }

    fn connected(&mut self) -> Result<&mut Connected> {
        self.conn.as_mut().ok_or_else(|| {
            Error::InvalidJob("the PostgreSQL sink was used before it was opened".into())
        })
    }

    /// The control connection, opened on first use.
    fn control(&mut self) -> Result<&mut Client> {
        if self.conn.as_ref().is_some_and(|c| c.control.is_none()) {
            let client = self.connect()?;
            self.connected()?.control = Some(client);
        }
        let conn = self.connected()?;
        conn.control
            .as_mut()
            .ok_or_else(|| Error::InvalidJob("no control connection".into()))
    }

    /// Runs `COMMIT PREPARED` or `ROLLBACK PREPARED` on `gid`; a name that no longer
    /// exists (42704) means it was settled before, which is success.
    fn settle(&mut self, verb: &str, gid: &str) -> Result<()> {
        let sql = format!("{verb} PREPARED {}", quote_literal(gid));
        match self.control()?.batch_execute(&sql) {
            Ok(()) => Ok(()),
            Err(e) if is_undefined_object(&e) => Ok(()),
            Err(e) => Err(self.err(&format!("{verb} PREPARED '{gid}' failed"), &e)),
        }
    }

    /// Maps and type-checks `batch` into rows; the first record that does not convert
    /// fails the whole batch before anything is sent.
    fn rows(&self, batch: &[T], types: &[Type]) -> Result<Vec<Vec<SqlValue>>> {
        batch
            .iter()
            .enumerate()
            .map(|(i, record)| {
                let row = (self.mapping)(record).map_err(|e| self.bad_record(i, &e))?;
                if row.len() != self.columns.len() {
                    return Err(self.bad_record(
                        i,
                        &format!(
                            "the mapping returned {} values for {} columns ({})",
                            row.len(),
                            self.columns.len(),
                            self.columns.join(", ")
                        ),
                    ));
                }
                for ((v, ty), col) in row.iter().zip(types).zip(self.columns.iter()) {
                    v.check(ty)
                        .map_err(|e| self.bad_record(i, &format!("column `{col}`: {e}")))?;
                }
                Ok(row)
            })
            .collect()
    }

    fn bad_record(&self, index: usize, why: &str) -> Error {
        Error::User(format!(
            "PostgreSQL sink (table `{}`): record {index} of a batch does not convert to a \
             row: {why}",
            self.config.table
        ))
    }

    /// Prepares the write statement and learns the columns' types; a missing table or
    /// column fails here, naming it.
    fn prepare(&self, client: &mut Client) -> Result<(Vec<Type>, Statement)> {
        if self.columns.is_empty() {
            return Err(Error::InvalidJob(format!(
                "PostgreSQL sink (table `{}`): no columns given",
                self.config.table
            )));
        }
        let table = quote_table(&self.config.table);
        let cols: Vec<String> = self.columns.iter().map(|c| quote_ident(c)).collect();
        let cols = cols.join(", ");
        let probe = format!("SELECT {cols} FROM {table} LIMIT 0");
        let stmt = client.prepare(&probe).map_err(|e| {
            let db = &self.config.database;
            match e.code() {
                Some(c) if *c == postgres::error::SqlState::UNDEFINED_TABLE => {
                    Error::User(format!(
                        "PostgreSQL sink: table `{}` does not exist in database `{db}` at {}; \
                     create it first (names are case-sensitive)",
                        self.config.table,
                        self.config.address()
                    ))
                }
                Some(c) if *c == postgres::error::SqlState::UNDEFINED_COLUMN => {
                    self.err("a sink column is missing from the table", &e)
                }
                _ => self.err("cannot read the table's columns", &e),
            }
        })?;
        let types: Vec<Type> = stmt.columns().iter().map(|c| c.type_().clone()).collect();
        let sql = match &self.config.mode {
            WriteMode::ExactlyOnce => format!("COPY {table} ({cols}) FROM STDIN (FORMAT binary)"),
            WriteMode::Upsert { key } => self.upsert_sql(&table, key, self.upsert_rows())?,
        };
        let statement = client
            .prepare(&sql)
            .map_err(|e| self.err("cannot prepare the write statement", &e))?;
        Ok((types, statement))
    }

    fn upsert_rows(&self) -> usize {
        UPSERT_ROWS.min(u16::MAX as usize / self.columns.len())
    }

    fn upsert_sql(&self, table: &str, key: &[String], rows: usize) -> Result<String> {
        if let Some(k) = key.iter().find(|k| !self.columns.contains(k)) {
            return Err(Error::InvalidJob(format!(
                "PostgreSQL sink (table `{}`): upsert key column `{k}` is not among the \
                 sink's columns ({})",
                self.config.table,
                self.columns.join(", ")
            )));
        }
        let n = self.columns.len();
        let cols: Vec<String> = self.columns.iter().map(|c| quote_ident(c)).collect();
        let values: Vec<String> = (0..rows)
            .map(|r| {
                let ps: Vec<String> = (1..=n).map(|c| format!("${}", r * n + c)).collect();
                format!("({})", ps.join(", "))
            })
            .collect();
        let keys: Vec<String> = key.iter().map(|k| quote_ident(k)).collect();
        let updates: Vec<String> = self
            .columns
            .iter()
            .filter(|c| !key.contains(c))
            .map(|c| format!("{0} = EXCLUDED.{0}", quote_ident(c)))
            .collect();
        let action = if updates.is_empty() {
            "NOTHING".to_string()
        } else {
            format!("UPDATE SET {}", updates.join(", "))
        };
        Ok(format!(
            "INSERT INTO {table} ({}) VALUES {} ON CONFLICT ({}) DO {action}",
            cols.join(", "),
            values.join(", "),
            keys.join(", ")
        ))
    }

    fn write_copy(&mut self, rows: Vec<Vec<SqlValue>>) -> Result<()> {
        let conn = self.connected()?;
        let result = (|| {
            let writer = conn.data.copy_in(&conn.statement)?;
            let mut writer = BinaryCopyInWriter::new(writer, &conn.types);
            for row in rows {
                writer.write_raw(row)?;
            }
            writer.finish()
        })();
        result
            .map(|_| ())
            .map_err(|e| self.err("COPY into the table failed", &e))
    }

    fn write_upsert(&mut self, rows: Vec<Vec<SqlValue>>, key: &[String]) -> Result<()> {
        // A statement may not update one row twice: keep each key's last row.
        let key_idx: Vec<usize> = key
            .iter()
            .filter_map(|k| self.columns.iter().position(|c| c == k))
            .collect();
        let mut last: HashMap<Vec<u8>, usize> = HashMap::with_capacity(rows.len());
        for (i, row) in rows.iter().enumerate() {
            let mut k = Vec::new();
            for &c in &key_idx {
                row[c].key_bytes(&mut k);
            }
            last.insert(k, i);
        }
        let mut keep: Vec<usize> = last.into_values().collect();
        keep.sort_unstable();
        let full = self.upsert_rows();
        let table = quote_table(&self.config.table);
        for chunk in keep.chunks(full) {
            let params: Vec<&(dyn ToSql + Sync)> = chunk
                .iter()
                .flat_map(|&i| rows[i].iter().map(|v| v as &(dyn ToSql + Sync)))
                .collect();
            let partial = if chunk.len() < full {
                Some(self.upsert_sql(&table, key, chunk.len())?)
            } else {
                None
            };
            let conn = self.connected()?;
            let result = match &partial {
                Some(sql) => conn.data.execute(sql.as_str(), &params),
                None => conn.data.execute(&conn.statement, &params),
            };
            result.map_err(|e| self.err("upsert into the table failed", &e))?;
        }
        Ok(())
    }
}

impl<T: Send + 'static> TwoPhaseCommitSink<T> for PostgresSink<T> {
    type Transaction = PgTransaction;
    type Committable = PreparedTransaction;

    fn open(&mut self, ctx: &TransactionContext) -> Result<()> {
        let longest = ctx.transaction_name(u64::MAX);
        if longest.len() > MAX_GID_BYTES {
            return Err(Error::InvalidJob(format!(
                "PostgreSQL sink: transaction names like `{longest}` exceed PostgreSQL's \
                 {MAX_GID_BYTES}-byte limit; shorten the job name or the sink's uid"
            )));
        }
        let mut data = self.connect()?;
        if self.config.mode == WriteMode::ExactlyOnce {
            let row = data
                .query_one("SHOW max_prepared_transactions", &[])
                .map_err(|e| self.err("cannot read max_prepared_transactions", &e))?;
            let setting: String = row.get(0);
            let setting: u32 = setting.trim().parse().unwrap_or(0);
            check_max_prepared_transactions(setting, ctx.parallelism).map_err(|e| {
                Error::User(format!(
                    "PostgreSQL sink (at {}): {e}",
                    self.config.address()
                ))
            })?;
        }
        let (types, statement) = self.prepare(&mut data)?;
        self.conn = Some(Connected {
            data,
            control: None,
            types,
            statement,
            in_transaction: false,
        });
        Ok(())
    }

    fn recover(
        &mut self,
        ctx: &TransactionContext,
        committable: Vec<PreparedTransaction>,
    ) -> Result<()> {
        let prefix = ctx.prefix();
        let rows = self
            .control()?
            .query(
                "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()",
                &[],
            )
            .map_err(|e| self.err("cannot list prepared transactions", &e))?;
        let lingering: Vec<String> = rows
            .iter()
            .map(|r| r.get::<_, String>(0))
            .filter(|g| is_own_gid(&prefix, g))
            .collect();
        let listed: HashSet<String> = committable.iter().map(|c| c.gid.clone()).collect();
        for c in committable {
            self.settle("COMMIT", &c.gid)?;
        }
        for gid in lingering.iter().filter(|g| !listed.contains(*g)) {
            self.settle("ROLLBACK", gid)?;
        }
        Ok(())
    }

    fn begin(&mut self, _ctx: &TransactionContext) -> Result<PgTransaction> {
        let conn = self.connected()?;
        let sql = if conn.in_transaction {
            // A transaction left open by an earlier error: drop it first.
            "ROLLBACK; BEGIN"
        } else {
            "BEGIN"
        };
        let result = conn.data.batch_execute(sql);
        conn.in_transaction = result.is_ok();
        result.map_err(|e| self.err("BEGIN failed", &e))?;
        Ok(PgTransaction { rows: 0 })
    }

    fn write(&mut self, txn: &mut PgTransaction, batch: &mut Vec<T>) -> Result<()> {
        let types = self.connected()?.types.clone();
        let rows = self.rows(batch, &types)?;
        let n = rows.len() as u64;
        match self.config.mode.clone() {
            WriteMode::ExactlyOnce => self.write_copy(rows)?,
            WriteMode::Upsert { key } => self.write_upsert(rows, &key)?,
        }
        batch.clear();
        txn.rows += n;
        Ok(())
    }

    fn pre_commit(
        &mut self,
        ctx: &TransactionContext,
        txn: PgTransaction,
        checkpoint_id: u64,
    ) -> Result<Option<PreparedTransaction>> {
        let gid = ctx.transaction_name(checkpoint_id);
        let exactly_once = self.config.mode == WriteMode::ExactlyOnce;
        let (sql, what) = if exactly_once && txn.rows > 0 {
            (
                format!("PREPARE TRANSACTION {}", quote_literal(&gid)),
                "PREPARE TRANSACTION",
            )
        } else {
            ("COMMIT".to_string(), "COMMIT")
        };
        let conn = self.connected()?;
        conn.in_transaction = false;
        conn.data
            .batch_execute(&sql)
            .map_err(|e| self.err(&format!("{what} for '{gid}' failed"), &e))?;
        Ok(
            (exactly_once && txn.rows > 0).then_some(PreparedTransaction {
                gid,
                rows: txn.rows,
            }),
        )
    }

    fn commit(&mut self, committable: PreparedTransaction) -> Result<()> {
        self.settle("COMMIT", &committable.gid)
    }

    fn abort(&mut self, _txn: PgTransaction) -> Result<()> {
        let conn = self.connected()?;
        conn.in_transaction = false;
        conn.data
            .batch_execute("ROLLBACK")
            .map_err(|e| self.err("ROLLBACK failed", &e))
    }
}

/// Whether `gid` is a transaction name of the sink with `prefix`: the prefix followed by
/// exactly `<subtask>-<checkpoint>`. The strict tail keeps a sink with uid `out` away from
/// the names of a sink with uid `out-2` in the same job (`job-out-2-0-5`).
pub fn is_own_gid(prefix: &str, gid: &str) -> bool {
    let Some(tail) = gid.strip_prefix(prefix) else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    matches!(tail.split_once('-'), Some((s, c)) if digits(s) && digits(c))
}

/// `'text'` with quotes doubled (standard-conforming strings).
fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// `"name"` with quotes doubled: names are used exactly as given (case-sensitive).
fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// `schema.table` quoted part by part.
fn quote_table(s: &str) -> String {
    s.split('.').map(quote_ident).collect::<Vec<_>>().join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_gids_need_the_exact_tail() {
        assert!(is_own_gid("job-out-", "job-out-0-5"));
        assert!(is_own_gid("job-out-", "job-out-12-345"));
        assert!(!is_own_gid("job-out-", "job-out-2-0-5"), "uid out-2's name");
        assert!(!is_own_gid("job-out-", "job-out-x-5"));
        assert!(!is_own_gid("job-out-", "other-out-0-5"));
        assert!(!is_own_gid("job-out-", "job-out-0-"));
    }

    #[test]
    fn quoting() {
        assert_eq!(quote_literal("a'b"), "'a''b'");
        assert_eq!(quote_table("s.My\"T"), "\"s\".\"My\"\"T\"");
    }
}
