//! An `http://` or `https://` URL the relay posts to (a webhook, an OAuth token endpoint),
//! split once at load into what a connection needs. One parser for both, so they refuse the
//! same things: another scheme, no host, a password in the URL.

use std::fmt;

/// A URL split: scheme, host, port, path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl {
    pub https: bool,
    /// The host as written, without brackets around an IPv6 address.
    pub host: String,
    pub port: u16,
    /// The path and query, `/` at least.
    pub path: String,
}

impl HttpUrl {
    /// `url` split, or `None` when it is not `http://` or `https://` with a host and no
    /// user or password.
    pub fn parse(url: &str) -> Option<HttpUrl> {
        let uri: http::Uri = url.parse().ok()?;
        let https = match uri.scheme_str()? {
            "https" => true,
            "http" => false,
            _ => return None,
        };
        let authority = uri.authority()?;
        if authority.as_str().contains('@') {
            return None;
        }
        let host = (authority.host())
            .trim_start_matches('[')
            .trim_end_matches(']');
        if host.is_empty() {
            return None;
        }
        Some(HttpUrl {
            https,
            host: host.to_string(),
            port: authority.port_u16().unwrap_or(if https { 443 } else { 80 }),
            path: uri.path_and_query().map_or("/", |p| p.as_str()).to_string(),
        })
    }
}

impl fmt::Display for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (scheme, default_port) = if self.https {
            ("https", 443)
        } else {
            ("http", 80)
        };
        match self.host.contains(':') {
            true => write!(f, "{scheme}://[{}]", self.host)?,
            false => write!(f, "{scheme}://{}", self.host)?,
        }
        if self.port != default_port {
            write!(f, ":{}", self.port)?;
        }
        f.write_str(&self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_what_a_connection_needs_and_refuses_the_rest() {
        let url = HttpUrl::parse("https://[::1]:8443/hook?x=1").unwrap();
        assert_eq!(
            (url.https, url.host.as_str(), url.port, url.path.as_str()),
            (true, "::1", 8443, "/hook?x=1")
        );
        assert_eq!(url.to_string(), "https://[::1]:8443/hook?x=1");
        assert_eq!(
            HttpUrl::parse("http://h.test").unwrap().to_string(),
            "http://h.test/"
        );
        for bad in [
            "ftp://h.test/",
            "https://u:p@h.test/",
            "h.test/x",
            "https:///x",
        ] {
            assert_eq!(HttpUrl::parse(bad), None, "{bad}");
        }
    }
}
