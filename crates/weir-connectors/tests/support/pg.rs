//! A real PostgreSQL server for tests: a fresh cluster in a temporary folder, listening on
//! loopback on a free port, stopped (and the folder removed) on drop.
//!
//! Each test starts its own server (initdb + start take well under a second with
//! `--no-sync` and `fsync=off`), so tests run in parallel without sharing anything.
//! As root (CI), `initdb` and `postgres` run as the `postgres` system user, which they
//! require. A server that cannot start fails the test with the cause; it never skips.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The superuser's password (host connections use scram-sha-256, so a wrong password is
/// refused like on a real server).
pub const PASSWORD: &str = "weir-test";

/// The table the CLI's keyed-count `--emit updates` writes into: `counts`, one row per
/// update and no key (read back with [`PgServer::key_counts`]).
pub const COUNTS_TABLE: &str = "CREATE TABLE counts (key BIGINT, count BIGINT)";

/// A running PostgreSQL server owned by the test.
pub struct PgServer {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
}

impl PgServer {
    /// A server with `max_prepared_transactions = 20`.
    pub fn start() -> PgServer {
        PgServer::start_with(&[("max_prepared_transactions", "20")])
    }

    /// A server with extra `postgresql.conf` settings.
    pub fn start_with(settings: &[(&str, &str)]) -> PgServer {
        let bin = bin_dir();
        let as_postgres = is_root();
        let dir = tempfile::Builder::new()
            .prefix("weir-pg-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary folder for PostgreSQL: {e}"));
        let data = dir.path().join("data");
        let pwfile = dir.path().join("pw");
        std::fs::write(&pwfile, PASSWORD).expect("write the password file");
        if as_postgres {
            let status = Command::new("chown")
                .args(["-R", "postgres:"])
                .arg(dir.path())
                .status()
                .expect("run chown");
            assert!(
                status.success(),
                "cannot give {} to the postgres user (does the user exist? \
                 apt-get install postgresql creates it)",
                dir.path().display()
            );
        }
        let mut server = PgServer {
            dir,
            bin,
            port: 0,
            as_postgres,
        };
        let out = server.run(
            "initdb",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-U".as_ref(),
                "postgres".as_ref(),
                "--auth-local=trust".as_ref(),
                "--auth-host=scram-sha-256".as_ref(),
                "--pwfile".as_ref(),
                pwfile.as_os_str(),
                "--no-sync".as_ref(),
                "--no-locale".as_ref(),
                "-E".as_ref(),
                "UTF8".as_ref(),
            ],
        );
        server.check(&out, "initdb");
        let mut options = format!(
            "-c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c fsync=off \
             -c synchronous_commit=off -c full_page_writes=off",
            server.dir.path().display()
        );
        for (k, v) in settings {
            options.push_str(&format!(" -c {k}={v}"));
        }
        // A free port can be taken between probing and binding: retry with another.
        let log = server.dir.path().join("server.log");
        for attempt in 0..5 {
            server.port = free_port();
            let opts = format!("-p {} {options}", server.port);
            let out = server.run(
                "pg_ctl",
                &[
                    "-D".as_ref(),
                    data.as_os_str(),
                    "-l".as_ref(),
                    log.as_os_str(),
                    "-w".as_ref(),
                    "-t".as_ref(),
                    "60".as_ref(),
                    "-o".as_ref(),
                    opts.as_ref(),
                    "start".as_ref(),
                ],
            );
            if out.status.success() {
                return server;
            }
            let log_text = std::fs::read_to_string(&log).unwrap_or_default();
            if attempt < 4 && log_text.contains("already in use") {
                continue;
            }
            server.check(&out, "pg_ctl start");
        }
        unreachable!("the last attempt either returns or panics")
    }

    /// The port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A sink URL for `table` in `database`, with the superuser's credentials.
    pub fn url(&self, database: &str, table: &str) -> String {
        format!(
            "postgres://postgres:{PASSWORD}@127.0.0.1:{}/{database}/{table}",
            self.port
        )
    }

    /// A client connected to `database`.
    pub fn client(&self, database: &str) -> postgres::Client {
        let conn = format!(
            "host=127.0.0.1 port={} user=postgres password={PASSWORD} dbname={database}",
            self.port
        );
        postgres::Client::connect(&conn, postgres::NoTls)
            .unwrap_or_else(|e| panic!("cannot connect to the test server: {e}"))
    }

    /// Runs SQL statements in `database`.
    pub fn exec(&self, database: &str, sql: &str) {
        self.client(database)
            .batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// Creates a database.
    pub fn create_database(&self, name: &str) {
        self.exec("postgres", &format!("CREATE DATABASE \"{name}\""));
    }

    /// The number of rows of `table` in `database`.
    pub fn count(&self, database: &str, table: &str) -> i64 {
        self.client(database)
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .unwrap_or_else(|e| panic!("count the rows of {table}: {e}"))
            .get(0)
    }

    /// Every `(key, count)` row of `table` in database `postgres`: what the CLI's
    /// keyed-count writes with `--sink postgres://…`.
    pub fn key_counts(&self, table: &str) -> Vec<(u64, u64)> {
        self.client("postgres")
            .query(&format!("SELECT key, count FROM {table}"), &[])
            .expect("read the sink's table")
            .iter()
            .map(|r| (r.get::<_, i64>(0) as u64, r.get::<_, i64>(1) as u64))
            .collect()
    }

    /// Prepared transactions of `database` whose name starts with `prefix`.
    pub fn prepared(&self, database: &str, prefix: &str) -> Vec<String> {
        self.client(database)
            .query(
                "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() \
                 AND starts_with(gid, $1) ORDER BY gid",
                &[&prefix],
            )
            .expect("list prepared transactions")
            .iter()
            .map(|r| r.get(0))
            .collect()
    }

    fn run(&self, tool: &str, args: &[&std::ffi::OsStr]) -> Output {
        let exe = self.bin.join(tool);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        cmd.args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {}: {e}; install PostgreSQL (apt-get install -y postgresql)",
                    exe.display()
                )
            })
    }

    fn check(&self, out: &Output, what: &str) {
        if out.status.success() {
            return;
        }
        let log = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        panic!(
            "{what} failed ({}): {}{}\nserver log:\n{log}\nThe PostgreSQL tests need a local \
             PostgreSQL installation (apt-get install -y postgresql) and must run as root \
             or as a user allowed to run initdb.",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }
}

impl Drop for PgServer {
    /// Stops the server at once (`-m immediate`: the cluster is thrown away anyway).
    fn drop(&mut self) {
        if self.port != 0 {
            let data = self.data();
            let _ = self.run(
                "pg_ctl",
                &[
                    "-D".as_ref(),
                    data.as_os_str(),
                    "-m".as_ref(),
                    "immediate".as_ref(),
                    "-w".as_ref(),
                    "stop".as_ref(),
                ],
            );
        }
    }
}

/// The binaries of the newest PostgreSQL installed: `$WEIR_PG_BIN`, Debian's
/// `/usr/lib/postgresql/<version>/bin`, or `pg_config --bindir`.
fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("WEIR_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return bin;
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if Path::new(&dir).join("initdb").exists() {
            return dir;
        }
    }
    panic!(
        "PostgreSQL server binaries (initdb, pg_ctl) not found in /usr/lib/postgresql/*/bin \
         nor via pg_config: install them with `apt-get install -y postgresql` (or set \
         WEIR_PG_BIN to the folder holding initdb)"
    );
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("find a free port on 127.0.0.1")
}
