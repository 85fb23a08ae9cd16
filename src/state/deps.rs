//! What `run` needs from outside, made by `main` or a test: the config's setup, the services,
//! the current context's slot, and what start-up opens (TLS, the spool). Nothing is global,
//! so tests run several relays in one process.

use std::sync::Arc;

use aws_credential_types::provider::SharedCredentialsProvider;

use super::context::{Context, Live, Services, Setup};
use crate::clock::{Clock, TokioClock};
use crate::config::Config;
use crate::inbound::tls::{Tls, TlsError};
use crate::reputation::sns_verifier::SnsVerifier;
use crate::spool::{Spool, SpoolError};
use crate::upstream::Upstreams;

/// What `run` needs from outside. Built by `main`, or by a test, which keeps handles on the
/// throttle (to peek at buckets) and on `live` (to reload as SIGHUP does).
#[derive(Clone)]
pub struct Deps {
    pub setup: Setup,
    pub services: Arc<Services>,
    /// The current context; `run` installs the first one.
    pub live: Arc<Live>,
}

impl Deps {
    /// The throttle built from the config's layers (and `[redis]`), on the real (tokio)
    /// clock, and fresh services.
    pub fn new(config: Arc<Config>, upstreams: Upstreams) -> Deps {
        let clock: Arc<dyn Clock> = Arc::new(TokioClock::new());
        let throttle = Arc::new(crate::throttle::from_config(&config, clock.clone()));
        let live = Live::new();
        let services = Arc::new(Services::new(&config, clock, &live));
        let setup = Setup::new(config, Arc::new(upstreams), throttle, None);
        Deps {
            setup,
            services,
            live,
        }
    }

    /// Reads `[smtp.tls]`'s certificate and key; a missing file or a key that is not the
    /// certificate's is a startup error.
    pub fn with_tls(mut self) -> Result<Deps, TlsError> {
        if let Some(tls) = &self.setup.config.smtp.tls {
            self.setup.tls = Some(Arc::new(Tls::load(tls)?));
        }
        Ok(self)
    }

    /// Opens `[spool]`: its directory (locked for this process, read back), or its S3 and
    /// SQS clients (credentials from the SDK's default chain); a spool that cannot be opened
    /// is a startup error. Must run within the tokio runtime.
    pub async fn with_spool(self) -> Result<Deps, SpoolError> {
        self.with_spool_using(None).await
    }

    /// As [`Deps::with_spool`], an s3 store with `credentials` when given (tests).
    pub async fn with_spool_using(
        mut self,
        credentials: Option<SharedCredentialsProvider>,
    ) -> Result<Deps, SpoolError> {
        let Some(config) = &self.setup.config.spool else {
            return Ok(self);
        };
        let clock = self.services.clock.clone();
        let spool = match config.s3() {
            None => Spool::open(config, clock)?,
            Some(_) => {
                let metrics = self.services.metrics.spool_store();
                // Boxed: the SDK's futures are deep types, kept out of the start's own.
                let open = Spool::open_s3(config, clock, metrics, credentials);
                let open: std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send + '_>> =
                    Box::pin(open);
                open.await?
            }
        };
        let services = Arc::get_mut(&mut self.services).expect("services not shared yet");
        services.spool = Some(spool);
        Ok(self)
    }

    /// The same, checking SNS's posts with `sns` (tests swap in a local certificate host).
    pub fn with_sns(mut self, sns: Arc<SnsVerifier>) -> Deps {
        let services = Arc::get_mut(&mut self.services).expect("services not shared yet");
        services.sns = sns;
        self
    }
}

/// Here, not in `context`: the context knows nothing of what `run` is given.
impl Context {
    /// The first context, from `deps`.
    pub fn new(deps: Deps) -> Context {
        let mut setup = deps.setup;
        // `Deps::with_tls` reports a bad certificate at startup; a caller that skipped it
        // still gets TLS, or a logged reason why not.
        if setup.tls.is_none() {
            setup.tls = setup.config.smtp.tls.as_ref().and_then(|config| {
                Tls::load(config)
                    .map_err(|e| tracing::error!(error = %e, "TLS not available"))
                    .ok()
                    .map(Arc::new)
            });
        }
        Context {
            setup,
            services: deps.services,
        }
    }
}
