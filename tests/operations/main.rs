//! Running the relay: the admin endpoint and its status page, the binary's command line and signals, and
//! shutdown under load.

use mailsluice_test_support as support;

mod admin;
mod admin_browser;
mod admin_flood;
mod cli;
mod dashboards;
mod deploy;
mod docs_drift;
mod reputation_admin;
mod shutdown;
mod sns;
mod status_page;
mod traces;
