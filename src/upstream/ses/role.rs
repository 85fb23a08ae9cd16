//! The IAM role the AWS SDK will take, read from `AWS_ROLE_ARN` (EKS's IRSA sets it from the
//! service account's annotation): a role in AWS's documentation account `123456789012`, the
//! one the shipped manifests carry until an operator sets theirs, cannot send. Said without
//! asking AWS, so `/readyz` and the start name the cause rather than an STS refusal.

/// AWS's example account id, in the shipped `serviceaccount.yaml` and AWS's documentation.
pub const PLACEHOLDER_ACCOUNT: &str = "123456789012";

/// Why the role `arn` (an `arn:aws:iam::ACCOUNT:role/NAME`) cannot send, if it is the
/// placeholder.
pub fn placeholder(arn: &str) -> Option<String> {
    let account = arn.split(':').nth(4)?;
    (account == PLACEHOLDER_ACCOUNT).then(|| {
        format!(
            "AWS_ROLE_ARN {arn} is in the placeholder account {PLACEHOLDER_ACCOUNT}: \
             set your role's ARN (deploy/VALUES.md)"
        )
    })
}

/// [`placeholder`] of the role in this process's `AWS_ROLE_ARN`, when it is set.
pub fn placeholder_in_env() -> Option<String> {
    placeholder(&std::env::var("AWS_ROLE_ARN").ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_placeholder_account_is_named_and_a_real_one_is_not() {
        let why = placeholder("arn:aws:iam::123456789012:role/mailsluice-ses").unwrap();
        assert!(why.contains("placeholder account 123456789012"), "{why}");
        assert_eq!(
            placeholder("arn:aws:iam::210987654321:role/mailsluice-ses"),
            None
        );
        assert_eq!(placeholder("not an arn"), None);
    }
}
