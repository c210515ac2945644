//! Connection strings: libpq's `key=value` form and its URI form
//! (`postgres://user:password@host:port/dbname`).

use super::PostgresError;

/// Where and as whom to connect.
#[derive(Clone, PartialEq, Eq)]
pub struct Dsn {
    /// A host name or address, or a directory holding the server's Unix socket.
    pub host: String,
    /// The port (also names the Unix socket, `.s.PGSQL.<port>`).
    pub port: u16,
    /// The user.
    pub user: String,
    /// The password, if the server asks for one.
    pub password: Option<String>,
    /// The database.
    pub dbname: String,
}

impl std::fmt::Debug for Dsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password stays out of logs and errors.
        f.debug_struct("Dsn")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("dbname", &self.dbname)
            .finish_non_exhaustive()
    }
}

fn bad(problem: impl Into<String>) -> PostgresError {
    PostgresError::Dsn(problem.into())
}

impl Dsn {
    /// Parses either form. Keys: `host`, `port`, `user`, `password`, `dbname`; any other
    /// key is refused (it would otherwise be silently ignored). Defaults: host
    /// `localhost`, port 5432, user `postgres`, dbname the user.
    ///
    /// # Errors
    ///
    /// [`PostgresError::Dsn`] naming what is wrong.
    pub fn parse(text: &str) -> Result<Dsn, PostgresError> {
        let pairs = match text.strip_prefix("postgres://").or_else(|| text.strip_prefix("postgresql://")) {
            Some(rest) => uri_pairs(rest)?,
            None => key_value_pairs(text)?,
        };
        let mut dsn = Dsn {
            host: "localhost".into(),
            port: 5432,
            user: "postgres".into(),
            password: None,
            dbname: String::new(),
        };
        for (key, value) in pairs {
            match key.as_str() {
                "host" => dsn.host = value,
                "port" => dsn.port = value.parse().map_err(|_| bad(format!("port {value:?} is not a port number")))?,
                "user" => dsn.user = value,
                "password" => dsn.password = Some(value),
                "dbname" => dsn.dbname = value,
                other => return Err(bad(format!("unknown key {other:?} (known: host, port, user, password, dbname)"))),
            }
        }
        if dsn.dbname.is_empty() {
            dsn.dbname = dsn.user.clone();
        }
        Ok(dsn)
    }
}

fn key_value_pairs(text: &str) -> Result<Vec<(String, String)>, PostgresError> {
    let mut pairs = Vec::new();
    for word in text.split_whitespace() {
        let Some((key, value)) = word.split_once('=') else {
            return Err(bad(format!("{word:?} is not key=value")));
        };
        let value = value.trim_matches('\'');
        pairs.push((key.to_owned(), value.to_owned()));
    }
    if pairs.is_empty() {
        return Err(bad("empty"));
    }
    Ok(pairs)
}

fn uri_pairs(rest: &str) -> Result<Vec<(String, String)>, PostgresError> {
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (dbname, query) = path.split_once('?').unwrap_or((path, ""));
    let mut pairs = Vec::new();
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((userinfo, hostport)) => (Some(userinfo), hostport),
        None => (None, authority),
    };
    if let Some(userinfo) = userinfo {
        let (user, password) = userinfo.split_once(':').map_or((userinfo, None), |(u, p)| (u, Some(p)));
        pairs.push(("user".into(), decode(user)?));
        if let Some(password) = password {
            pairs.push(("password".into(), decode(password)?));
        }
    }
    let (host, port) = match hostport.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (hostport, None),
    };
    if !host.is_empty() {
        pairs.push(("host".into(), decode(host)?));
    }
    if let Some(port) = port {
        pairs.push(("port".into(), port.to_owned()));
    }
    if !dbname.is_empty() {
        pairs.push(("dbname".into(), decode(dbname)?));
    }
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').ok_or_else(|| bad(format!("{pair:?} is not key=value")))?;
        pairs.push((key.to_owned(), decode(value)?));
    }
    Ok(pairs)
}

/// Percent-decoding, for the URI form.
fn decode(text: &str) -> Result<String, PostgresError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3).ok_or_else(|| bad(format!("bad escape in {text:?}")))?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad(format!("bad escape in {text:?}")))?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad(format!("{text:?} is not UTF-8 once decoded")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_dsn_both_forms() {
        let a = Dsn::parse("host=/tmp/pg port=5544 user=me dbname=shop password='s3cret'").unwrap();
        assert_eq!((a.host.as_str(), a.port, a.user.as_str(), a.dbname.as_str()), ("/tmp/pg", 5544, "me", "shop"));
        assert_eq!(a.password.as_deref(), Some("s3cret"));
        let b = Dsn::parse("postgres://me:p%40ss@db.local:6000/shop?host=/run/pg").unwrap();
        assert_eq!((b.host.as_str(), b.port, b.password.as_deref()), ("/run/pg", 6000, Some("p@ss")));
        assert_eq!(Dsn::parse("user=me").unwrap().dbname, "me");
        assert!(!format!("{b:?}").contains("p@ss"));
        for bad in ["", "host", "sslmode=require", "port=x", "postgres://h/db%zz"] {
            assert!(matches!(Dsn::parse(bad), Err(PostgresError::Dsn(_))), "{bad}");
        }
    }
}
