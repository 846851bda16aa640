//! A [`Choice`] as one line of hex words and back: how `semaphore run`
//! hands its store to its guardian through a pipe.

use std::time::Duration;

use super::Choice;

impl Choice {
    /// The choice as one line of hex words, to hand to `semaphore run`'s
    /// guardian through its pipe (never on a command line, where others
    /// could read a password in it): the store's kind, then its fields.
    pub(crate) fn to_line(&self) -> String {
        use std::os::unix::ffi::OsStrExt;
        if let Choice::Sqlite(path) = self {
            return format!("{} {}", hex(b"sqlite"), hex(path.as_os_str().as_bytes()));
        }
        let words: Vec<String> = match self {
            Choice::Memory | Choice::Sqlite(_) => vec!["memory".into()],
            Choice::Postgres {
                url,
                schema,
                prepared,
                session,
                migrate,
            } => vec![
                "postgres".into(),
                url.clone(),
                schema.clone(),
                prepared.to_string(),
                ms(*session),
                migrate.to_string(),
            ],
            Choice::Redis {
                url,
                cluster,
                prefix,
                grace,
                session,
            } => vec![
                if *cluster { "redis-cluster" } else { "redis" }.into(),
                url.clone(),
                prefix.clone(),
                grace.as_millis().to_string(),
                ms(*session),
            ],
            Choice::Mysql {
                url,
                prefix,
                session,
            } => vec!["mysql".into(), url.clone(), prefix.clone(), ms(*session)],
            Choice::Etcd {
                urls,
                prefix,
                session,
            } => vec!["etcd".into(), urls.clone(), prefix.clone(), ms(*session)],
        };
        words
            .iter()
            .map(|w| hex(w.as_bytes()))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// [`to_line`](Choice::to_line) read back; `None` if it is not one.
    pub(crate) fn from_line(line: &str) -> Option<Self> {
        use std::os::unix::ffi::OsStringExt;
        let raw: Vec<Vec<u8>> = line
            .split_whitespace()
            .map(unhex)
            .collect::<Option<Vec<_>>>()?;
        if let [kind, path] = &raw[..]
            && kind == b"sqlite"
        {
            return Some(Choice::Sqlite(
                std::ffi::OsString::from_vec(path.clone()).into(),
            ));
        }
        let words: Vec<String> = raw
            .into_iter()
            .map(String::from_utf8)
            .collect::<Result<_, _>>()
            .ok()?;
        let session = |w: &String| -> Option<Option<Duration>> {
            if w.is_empty() {
                return Some(None);
            }
            w.parse().ok().map(|ms| Some(Duration::from_millis(ms)))
        };
        Some(match &words[..] {
            [kind] if kind == "memory" => Choice::Memory,
            [kind, url, schema, prepared, s, migrate] if kind == "postgres" => Choice::Postgres {
                url: url.clone(),
                schema: schema.clone(),
                prepared: prepared == "true",
                session: session(s)?,
                migrate: migrate == "true",
            },
            [kind, url, prefix, grace, s] if kind == "redis" || kind == "redis-cluster" => {
                Choice::Redis {
                    url: url.clone(),
                    cluster: kind == "redis-cluster",
                    prefix: prefix.clone(),
                    grace: Duration::from_millis(grace.parse().ok()?),
                    session: session(s)?,
                }
            }
            [kind, url, prefix, s] if kind == "mysql" => Choice::Mysql {
                url: url.clone(),
                prefix: prefix.clone(),
                session: session(s)?,
            },
            [kind, urls, prefix, s] if kind == "etcd" => Choice::Etcd {
                urls: urls.clone(),
                prefix: prefix.clone(),
                session: session(s)?,
            },
            _ => return None,
        })
    }
}

fn ms(d: Option<Duration>) -> String {
    d.map_or(String::new(), |d| d.as_millis().to_string())
}

fn hex(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "-".into();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(word: &str) -> Option<Vec<u8>> {
    if word == "-" {
        return Some(Vec::new());
    }
    (0..word.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(word.get(i..i + 2)?, 16).ok())
        .collect()
}
