//! Driving headless Chromium over the DevTools protocol on a pipe (`--remote-debugging-pipe`:
//! JSON messages ended by a NUL byte, commands on the browser's fd 3, answers on its fd 4),
//! so a test can click the dashboard's buttons like a person. No WebSocket, no crate: two
//! pipes set up with `libc`.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A running headless Chromium and a page of it.
pub struct Browser {
    child: Child,
    commands: File,
    answers: File,
    pending: Vec<u8>,
    next_id: u64,
    session: String,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn pipe() -> (i32, i32) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe(2) failed");
    (fds[0], fds[1])
}

impl Browser {
    /// Starts `chromium` headless with a profile in `profile` and opens `url` in a page.
    pub fn open(chromium: &Path, profile: &Path, url: &str) -> Browser {
        let (cmd_read, cmd_write) = pipe();
        let (ans_read, ans_write) = pipe();
        let mut command = Command::new(chromium);
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-pipe",
                "--window-size=1280,1000",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: only async-signal-safe calls (dup2, close) between fork and exec.
        unsafe {
            command.pre_exec(move || {
                // The pipes may themselves be fds 3 and 4: move them out of the way first.
                let (r, w) = (
                    libc::fcntl(cmd_read, libc::F_DUPFD, 10),
                    libc::fcntl(ans_write, libc::F_DUPFD, 10),
                );
                if r < 0 || w < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                for fd in [cmd_read, cmd_write, ans_read, ans_write] {
                    libc::close(fd);
                }
                if libc::dup2(r, 3) < 0 || libc::dup2(w, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(r);
                libc::close(w);
                Ok(())
            });
        }
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromium.display()));
        // SAFETY: the parent owns these ends from now on; the child's copies were closed
        // by its exec (or kept as fds 3 and 4).
        let (commands, answers) = unsafe {
            libc::close(cmd_read);
            libc::close(ans_write);
            (File::from_raw_fd(cmd_write), File::from_raw_fd(ans_read))
        };
        let mut b = Browser {
            child,
            commands,
            answers,
            pending: Vec::new(),
            next_id: 0,
            session: String::new(),
        };
        let target = b.call("Target.createTarget", json!({ "url": url }), false);
        let target_id = target["targetId"]
            .as_str()
            .expect("a target id")
            .to_string();
        let attached = b.call(
            "Target.attachToTarget",
            json!({ "targetId": target_id, "flatten": true }),
            false,
        );
        b.session = attached["sessionId"]
            .as_str()
            .expect("a session")
            .to_string();
        b
    }

    /// Sends a command (to the page when `page`) and returns its result.
    fn call(&mut self, method: &str, params: Value, page: bool) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if page {
            message["sessionId"] = json!(self.session);
        }
        let mut bytes = message.to_string().into_bytes();
        bytes.push(0);
        self.commands.write_all(&bytes).expect("write to chromium");
        loop {
            let answer = self.read_message();
            if answer["id"] == id {
                if let Some(e) = answer.get("error") {
                    panic!("chromium refused {method}: {e}");
                }
                return answer["result"].clone();
            }
        }
    }

    fn read_message(&mut self) -> Value {
        loop {
            if let Some(end) = self.pending.iter().position(|&b| b == 0) {
                let message: Vec<u8> = self.pending.drain(..=end).collect();
                return serde_json::from_slice(&message[..end]).expect("a JSON message");
            }
            let mut chunk = [0u8; 65536];
            let n = self.answers.read(&mut chunk).expect("read from chromium");
            assert!(n > 0, "chromium closed its DevTools pipe");
            self.pending.extend_from_slice(&chunk[..n]);
        }
    }

    /// Evaluates `expression` in the page (awaiting a promise) and returns its value.
    pub fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
            true,
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("{expression} threw: {e}");
        }
        r["result"]["value"].clone()
    }

    /// Evaluates `expression` until it is truthy; returns that value.
    pub fn wait_for(&mut self, expression: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.eval(expression);
            if !(v.is_null() || v == json!(false) || v == json!("")) {
                return v;
            }
            assert!(Instant::now() < deadline, "never true: {expression}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
