//! A job running in the background whose output is collected line by line as it comes, with
//! the time each line arrived: tests wait (bounded) for what they look for, and measure when
//! it was printed.

use super::wait_bounded;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A line of output: when it arrived, whether on standard error, the text.
#[derive(Debug, Clone)]
pub struct Line {
    pub at: Instant,
    pub stderr: bool,
    pub text: String,
}

/// How a job ended.
pub struct Ended {
    /// Its exit code; -1 if a signal killed it.
    pub code: i32,
    /// Its whole output, standard output and error interleaved as they came.
    pub text: String,
    pub stdout: String,
}

pub struct Job {
    child: Child,
    out: Arc<Mutex<Vec<Line>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
    pub started: Instant,
}

impl Job {
    pub fn spawn(cmd: &mut Command) -> Job {
        let started = Instant::now();
        let mut child =
            cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start the job");
        let out = Arc::new(Mutex::new(Vec::new()));
        let mut readers = Vec::new();
        let pipes: Vec<(bool, Box<dyn Read + Send>)> =
            vec![(false, Box::new(child.stdout.take().unwrap())), (true, Box::new(child.stderr.take().unwrap()))];
        for (stderr, pipe) in pipes {
            let out = out.clone();
            readers.push(std::thread::spawn(move || {
                for text in BufReader::new(pipe).lines().map_while(Result::ok) {
                    out.lock().unwrap().push(Line { at: Instant::now(), stderr, text });
                }
            }));
        }
        Job { child, out, readers, started }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn lines(&self) -> Vec<Line> {
        self.out.lock().unwrap().clone()
    }

    /// Every line, standard output and error interleaved as they came.
    pub fn text(&self) -> String {
        self.lines().iter().map(|l| l.text.as_str()).collect::<Vec<_>>().join("\n")
    }

    /// Standard output only.
    pub fn stdout(&self) -> String {
        self.lines().iter().filter(|l| !l.stderr).map(|l| format!("{}\n", l.text)).collect()
    }

    /// Waits (at most `limit`) until `f` finds what it wants in the output.
    pub fn wait_for<T>(&self, limit: Duration, what: &str, mut f: impl FnMut(&[Line]) -> Option<T>) -> T {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(v) = f(&self.lines()) {
                return v;
            }
            assert!(Instant::now() < deadline, "{what}: not seen within {limit:?}; output:\n{}", self.text());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// When the first line containing `pat` arrived, if one did.
    pub fn first(&self, pat: &str) -> Option<Instant> {
        self.lines().iter().find(|l| l.text.contains(pat)).map(|l| l.at)
    }

    /// `fdwatch`: waits for `n` "ready" lines; returns rank → (pid, host).
    pub fn ready(&self, n: usize, limit: Duration) -> Vec<(u32, String)> {
        self.wait_for(limit, "every rank ready", |lines| {
            let mut v: Vec<Option<(u32, String)>> = vec![None; n];
            for l in lines {
                let w: Vec<&str> = l.text.split_whitespace().collect();
                if w.len() >= 8 && w[0] == "rank" && w[2] == "ready" {
                    v[w[1].parse::<usize>().ok()?] = Some((w[4].parse().ok()?, w[6].to_string()));
                }
            }
            v.into_iter().collect::<Option<Vec<_>>>()
        })
    }

    /// Waits (at most `limit`) for the job to end: its exit code (-1 if killed by a signal)
    /// and whole output. A job still running then is killed and the test fails.
    pub fn finish(self, limit: Duration) -> (i32, String) {
        let e = self.end(limit);
        (e.code, e.text)
    }

    /// [`Job::finish`], with standard output apart.
    pub fn end(mut self, limit: Duration) -> Ended {
        let st = wait_bounded(&mut self.child, limit);
        if st.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let text = self.text();
        let st = st.unwrap_or_else(|| panic!("the job did not end within {limit:?}; output:\n{text}"));
        Ended { code: st.code().unwrap_or(-1), text, stdout: self.stdout() }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
