//! The string to sign, checked by hand and against messages signed apart from this code
//! (`tests/fixtures/sns/make.py`: Python and openssl, from AWS's documentation).

use super::*;

const CERT: &str = include_str!("../../../tests/fixtures/sns/cert.pem");
const V1: &str = include_str!("../../../tests/fixtures/sns/notification-v1.json");
const V2: &str = include_str!("../../../tests/fixtures/sns/notification-v2.json");
const CONFIRMATION: &str = include_str!("../../../tests/fixtures/sns/confirmation.json");
const UNSUBSCRIBED: &str = include_str!("../../../tests/fixtures/sns/unsubscribed.json");
const TOPIC: &str = "arn:aws:sns:eu-west-1:123456789012:ses-events";

fn message(text: &str) -> SnsMessage {
    serde_json::from_str(text).unwrap()
}

fn check(m: &SnsMessage) -> Result<(), SignatureError> {
    signed(m)?.verify(m, &public_key(CERT.as_bytes())?)
}

fn notification(subject: Option<&str>) -> SnsMessage {
    SnsMessage {
        kind: "Notification".into(),
        message_id: "id-1".into(),
        topic_arn: TOPIC.into(),
        subject: subject.map(String::from),
        message: "{\"a\":\"b\\nc\"}".into(),
        timestamp: "2026-12-01T10:00:00.000Z".into(),
        signature_version: Some("2".into()),
        signature: Some("AAAA".into()),
        signing_cert_url: Some(
            "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-c0ffee.pem".into(),
        ),
        subscribe_url: Some("https://sns.eu-west-1.amazonaws.com/?Action=x".into()),
        token: Some("tok".into()),
    }
}

#[test]
fn a_notification_signs_its_fields_in_order_with_the_subject_only_when_present() {
    let head = "Message\n{\"a\":\"b\\nc\"}\nMessageId\nid-1\n";
    let tail = "Timestamp\n2026-12-01T10:00:00.000Z\nTopicArn\narn:aws:sns:eu-west-1:123456789012:ses-events\nType\nNotification\n";
    assert_eq!(
        string_to_sign(&notification(None)).unwrap(),
        format!("{head}{tail}")
    );
    assert_eq!(
        string_to_sign(&notification(Some("Hi"))).unwrap(),
        format!("{head}Subject\nHi\n{tail}")
    );
}

#[test]
fn a_confirmation_signs_its_url_and_token_and_never_its_subject() {
    let mut m = notification(Some("ignored"));
    m.kind = "SubscriptionConfirmation".into();
    assert_eq!(
        string_to_sign(&m).unwrap(),
        "Message\n{\"a\":\"b\\nc\"}\nMessageId\nid-1\n\
         SubscribeURL\nhttps://sns.eu-west-1.amazonaws.com/?Action=x\n\
         Timestamp\n2026-12-01T10:00:00.000Z\nToken\ntok\n\
         TopicArn\narn:aws:sns:eu-west-1:123456789012:ses-events\nType\nSubscriptionConfirmation\n"
    );
    m.token = None;
    assert_eq!(string_to_sign(&m), Err(SignatureError::Missing("Token")));
    m.kind = "Gossip".into();
    assert!(matches!(string_to_sign(&m), Err(SignatureError::Type(_))));
}

#[test]
fn messages_signed_apart_verify_in_both_versions() {
    for text in [V1, V2, CONFIRMATION, UNSUBSCRIBED] {
        let m = message(text);
        assert_eq!(check(&m), Ok(()), "{text}");
    }
    assert_eq!(message(V1).signature_version.as_deref(), Some("1"));
    assert_eq!(message(V2).signature_version.as_deref(), Some("2"));
}

#[test]
fn any_change_to_a_signed_field_or_the_version_breaks_the_signature() {
    let mut m = message(V2);
    m.message = m.message.replace("gone-v2", "gone-v3");
    assert_eq!(check(&m), Err(SignatureError::Mismatch));
    let mut m = message(V1);
    m.subject = None;
    assert_eq!(check(&m), Err(SignatureError::Mismatch));
    let mut m = message(V1);
    m.signature_version = Some("2".into());
    assert_eq!(check(&m), Err(SignatureError::Mismatch));
    let mut m = message(V2);
    m.signature_version = Some("3".into());
    assert_eq!(check(&m), Err(SignatureError::Version("3".into())));
    let mut m = message(V2);
    m.signature = None;
    assert_eq!(check(&m), Err(SignatureError::Unsigned("Signature")));
    let mut m = message(V2);
    m.signature = Some("not base64!".into());
    assert_eq!(check(&m), Err(SignatureError::Encoding));
}

#[test]
fn the_certificate_comes_only_from_sns_in_the_topic_region() {
    let good = "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-x.pem";
    assert_eq!(
        sns_url(good, TOPIC).unwrap().path(),
        "/SimpleNotificationService-x.pem"
    );
    for bad in [
        "http://sns.eu-west-1.amazonaws.com/x.pem",
        "https://sns.us-east-1.amazonaws.com/x.pem",
        "https://sns.eu-west-1.amazonaws.com.evil.example/x.pem",
        "https://evil.example/sns.eu-west-1.amazonaws.com/x.pem",
        "https://user@sns.eu-west-1.amazonaws.com/x.pem",
        "https://sns.eu-west-1.amazonaws.com:8443/x.pem",
        "https://SNS.eu-west-1.amazonaws.com/x.pem",
        "https://127.0.0.1/x.pem",
        "//sns.eu-west-1.amazonaws.com/x.pem",
        "not a url",
    ] {
        assert!(
            matches!(sns_url(bad, TOPIC), Err(SignatureError::Host(..))),
            "{bad}"
        );
    }
    for topic in [
        "arn:aws:s3:::b",
        "arn:aws:sns:EU/../:1:t",
        "arn:aws:sns::1:t",
    ] {
        assert!(
            matches!(sns_url(good, topic), Err(SignatureError::Topic(_))),
            "{topic}"
        );
    }
    let mut m = message(V2);
    m.signing_cert_url = Some("https://attacker.example/cert.pem".into());
    assert!(matches!(signed(&m), Err(SignatureError::Host(..))));
}

/// On SNS's host, only the paths of its certificates: any other path (a confirmation URL, an
/// API action, a page) is never fetched as a certificate.
#[test]
fn the_certificate_is_only_at_a_path_of_sns_certificates() {
    let at = |path: &str| format!("https://sns.eu-west-1.amazonaws.com{path}");
    for good in [
        "/SimpleNotificationService-9c6465fa7f48f5cacd23014631ec1136.pem",
        "/SimpleNotificationService-0A1b.pem",
    ] {
        assert_eq!(certificate_url(&at(good), TOPIC).unwrap().path(), good);
    }
    for bad in [
        "/SimpleNotificationService-x.pem",
        "/SimpleNotificationService-.pem",
        "/SimpleNotificationService-abc.pem?Action=Publish",
        "/SimpleNotificationService-abc.pem/",
        "/SimpleNotificationService-abc.PEM",
        "/simplenotificationservice-abc.pem",
        "/x/SimpleNotificationService-abc.pem",
        "/SimpleNotificationService-ab/../cd.pem",
        "/?Action=ConfirmSubscription&Token=t",
        "/huge.pem",
        "/",
    ] {
        assert!(
            matches!(
                certificate_url(&at(bad), TOPIC),
                Err(SignatureError::CertificatePath(_))
            ),
            "{bad}"
        );
    }
    let long = format!("/SimpleNotificationService-{}.pem", "a".repeat(65));
    assert!(certificate_url(&at(&long), TOPIC).is_err());
    let mut m = message(V2);
    m.signing_cert_url = Some(at("/?Action=ListTopics"));
    assert!(matches!(
        signed(&m),
        Err(SignatureError::CertificatePath(_))
    ));
}

#[test]
fn a_certificate_that_is_not_one_is_refused() {
    assert!(matches!(
        public_key(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
        Err(SignatureError::Certificate(_))
    ));
    assert!(matches!(
        public_key(b"hello"),
        Err(SignatureError::Certificate(_))
    ));
}
