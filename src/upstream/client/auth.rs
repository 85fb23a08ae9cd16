//! AUTH towards upstream (RFC 4954): PLAIN when offered, else LOGIN, as most submission
//! servers and SES's SMTP endpoint accept; or XOAUTH2 with a bearer token (Exchange Online,
//! Gmail). The connection is encrypted by then unless the operator chose `tls = "none"`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use super::{Client, ClientError};

/// The relay's login upstream.
#[derive(Clone)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Logs in; `false` when upstream offers neither PLAIN nor LOGIN (nothing sent).
    pub async fn auth(&mut self, credentials: &Credentials) -> Result<bool, ClientError> {
        let Credentials { user, password } = credentials;
        if self.extensions().auth_plain {
            let token = STANDARD.encode(format!("\0{user}\0{password}"));
            self.command(format!("AUTH PLAIN {token}\r\n").as_bytes())
                .await?;
            return Ok(true);
        }
        if !self.extensions().auth_login {
            return Ok(false);
        }
        self.command(b"AUTH LOGIN\r\n").await?;
        self.command(format!("{}\r\n", STANDARD.encode(user)).as_bytes())
            .await?;
        self.command(format!("{}\r\n", STANDARD.encode(password)).as_bytes())
            .await?;
        Ok(true)
    }
}

impl Client {
    /// AUTH XOAUTH2 as `user` with `token`: the SASL string of Google's and Microsoft's
    /// XOAUTH2 (`user=<user>^Aauth=Bearer <token>^A^A`, base64). A server that refuses the
    /// token first answers `334` with its error in JSON and waits for an empty line; its
    /// refusal then comes.
    pub async fn auth_xoauth2(&mut self, user: &str, token: &str) -> Result<(), ClientError> {
        let sasl = STANDARD.encode(format!("user={user}\x01auth=Bearer {token}\x01\x01"));
        let reply = self
            .command(format!("AUTH XOAUTH2 {sasl}\r\n").as_bytes())
            .await?;
        if reply.code == 334 {
            self.command(b"\r\n").await?;
        }
        Ok(())
    }
}
