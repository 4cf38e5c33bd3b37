//! S3's XML answers, read by local name (servers differ on the namespace, and an `Error` has
//! none), with a ceiling on nodes and on every text kept, no DTD: an error's code and
//! message, a multipart upload's id, a completed upload's ETag (or the error S3 may send
//! inside a `200`), and a page of a bucket's list.

use roxmltree::{Document, Node, ParsingOptions};

use crate::limits;

/// Characters of an error's message kept.
const MESSAGE_MAX_CHARS: usize = 256;

/// An answer that is not what its request expects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadXml(pub String);

fn parse(text: &str) -> Result<Document<'_>, BadXml> {
    let options =
        ParsingOptions { allow_dtd: false, nodes_limit: limits::ARCHIVE_XML_NODES_MAX, ..ParsingOptions::default() };
    Document::parse_with_options(text, options).map_err(|e| BadXml(format!("not XML: {e}")))
}

fn child<'a, 'i>(n: Node<'a, 'i>, local: &str) -> Option<Node<'a, 'i>> {
    n.children().find(|c| c.is_element() && c.tag_name().name() == local)
}

/// The text of `n`'s child `local`, refused over `max` bytes.
fn text_of(n: Node, local: &str, max: usize) -> Result<Option<String>, BadXml> {
    let Some(c) = child(n, local) else { return Ok(None) };
    let t = c.text().unwrap_or("").trim();
    if t.len() > max {
        return Err(BadXml(format!("{local} over {max} bytes")));
    }
    Ok(Some(t.to_string()))
}

fn root<'a, 'i>(doc: &'a Document<'i>, local: &str) -> Result<Node<'a, 'i>, BadXml> {
    let r = doc.root_element();
    if r.tag_name().name() == local {
        Ok(r)
    } else {
        Err(BadXml(format!("a {} where a {local} was expected", r.tag_name().name())))
    }
}

/// An `<Error>`'s code and message, when `text` is one.
pub fn error(text: &str) -> Option<(String, String)> {
    let doc = parse(text).ok()?;
    let r = root(&doc, "Error").ok()?;
    let code = text_of(r, "Code", 64).ok()??;
    let message = child(r, "Message").and_then(|m| m.text()).unwrap_or("").trim();
    Some((code, message.chars().take(MESSAGE_MAX_CHARS).collect()))
}

/// The `UploadId` of an `InitiateMultipartUploadResult`.
pub fn upload_id(text: &str) -> Result<String, BadXml> {
    let doc = parse(text)?;
    let r = root(&doc, "InitiateMultipartUploadResult")?;
    match text_of(r, "UploadId", limits::ARCHIVE_KEY_MAX_BYTES)? {
        Some(id) if !id.is_empty() => Ok(id),
        _ => Err(BadXml("no UploadId".into())),
    }
}

/// The ETag of a `CompleteMultipartUploadResult`; an `<Error>` S3 sent with its `200` (it
/// answers before it has put the parts together) is the error it says.
pub fn completed(text: &str) -> Result<Result<String, (String, String)>, BadXml> {
    if let Some(e) = error(text) {
        return Ok(Err(e));
    }
    let doc = parse(text)?;
    let r = root(&doc, "CompleteMultipartUploadResult")?;
    match text_of(r, "ETag", 256)? {
        Some(etag) => Ok(Ok(etag)),
        None => Err(BadXml("no ETag".into())),
    }
}

/// One object of a list page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub key: String,
    pub size: u64,
    /// Some servers leave it out of lists.
    pub etag: Option<String>,
}

/// A page of `ListObjectsV2`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    pub objects: Vec<Listed>,
    /// With a delimiter: the prefixes under the one asked for, up to the delimiter.
    pub prefixes: Vec<String>,
    /// Where the next page starts; none on the last.
    pub next: Option<String>,
}

/// A `ListBucketResult` page: at most [`limits::ARCHIVE_LIST_KEYS_MAX`] keys and prefixes.
pub fn page(text: &str) -> Result<Page, BadXml> {
    let doc = parse(text)?;
    let r = root(&doc, "ListBucketResult")?;
    let mut page = Page::default();
    for n in r.children().filter(|c| c.is_element()) {
        if page.objects.len() + page.prefixes.len() >= limits::ARCHIVE_LIST_KEYS_MAX {
            return Err(BadXml(format!("a page over {} keys", limits::ARCHIVE_LIST_KEYS_MAX)));
        }
        match n.tag_name().name() {
            "Contents" => {
                let key = text_of(n, "Key", limits::ARCHIVE_KEY_MAX_BYTES)?
                    .ok_or(BadXml("an object without a Key".into()))?;
                let size = text_of(n, "Size", 20)?
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| BadXml(format!("{key}: no Size")))?;
                let etag = text_of(n, "ETag", 256)?;
                page.objects.push(Listed { key, size, etag });
            }
            "CommonPrefixes" => {
                if let Some(p) = text_of(n, "Prefix", limits::ARCHIVE_KEY_MAX_BYTES)? {
                    page.prefixes.push(p);
                }
            }
            _ => {}
        }
    }
    let truncated = text_of(r, "IsTruncated", 8)?.is_some_and(|t| t == "true");
    let token = text_of(r, "NextContinuationToken", limits::ARCHIVE_KEY_MAX_BYTES)?.filter(|t| !t.is_empty());
    page.next = match (truncated, token) {
        (true, Some(t)) => Some(t),
        (true, None) => return Err(BadXml("a page that is truncated without where the next starts".into())),
        // A server that leaves IsTruncated out but says where the next page starts.
        (false, t) => t.filter(|_| child(r, "IsTruncated").is_none()),
    };
    Ok(page)
}

/// The fuzz target's harness (`fuzz/fuzz_targets/s3_xml.rs`): `data` as each answer the box
/// reads, which must be read or refused, never panic, and hold within the ceilings.
pub fn fuzz(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Some((code, message)) = error(&text) {
        assert!(code.len() <= 64 && message.chars().count() <= MESSAGE_MAX_CHARS);
    }
    let _ = upload_id(&text).map(|id| assert!(!id.is_empty() && id.len() <= limits::ARCHIVE_KEY_MAX_BYTES));
    let _ = completed(&text);
    if let Ok(p) = page(&text) {
        assert!(p.objects.len() + p.prefixes.len() <= limits::ARCHIVE_LIST_KEYS_MAX);
        assert!(p.objects.iter().all(|o| o.key.len() <= limits::ARCHIVE_KEY_MAX_BYTES));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fuzz_corpus_goes_through_without_panicking() {
        let n = crate::base::testing::replay_corpus("s3_xml", fuzz);
        assert!(n >= 5, "{n} inputs in the corpus");
    }

    #[test]
    fn errors_with_or_without_a_namespace() {
        let e = "<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code><Message>The request \
                 signature we calculated does not match</Message><RequestId>1</RequestId></Error>";
        assert_eq!(
            error(e),
            Some(("SignatureDoesNotMatch".into(), "The request signature we calculated does not match".into()))
        );
        assert_eq!(error("<Error xmlns=\"x\"><Code>SlowDown</Code></Error>"), Some(("SlowDown".into(), String::new())));
        assert_eq!(error("<ListBucketResult/>"), None);
        assert_eq!(error("not xml"), None);
    }

    #[test]
    fn upload_ids_and_completions() {
        let ns = "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"";
        let started = format!(
            "<InitiateMultipartUploadResult {ns}><Bucket>b</Bucket><Key>k</Key><UploadId>abc-1</UploadId>\
             </InitiateMultipartUploadResult>"
        );
        assert_eq!(upload_id(&started).unwrap(), "abc-1");
        assert!(upload_id("<InitiateMultipartUploadResult/>").is_err());
        let done = format!("<CompleteMultipartUploadResult {ns}><ETag>\"e-2\"</ETag></CompleteMultipartUploadResult>");
        assert_eq!(completed(&done).unwrap(), Ok("\"e-2\"".into()));
        let failed = "<Error><Code>InternalError</Code><Message>retry</Message></Error>";
        assert_eq!(completed(failed).unwrap(), Err(("InternalError".into(), "retry".into())));
    }

    #[test]
    fn list_pages_and_where_the_next_starts() {
        let p = page(
            "<ListBucketResult><IsTruncated>true</IsTruncated><Contents><Key>a/1</Key><Size>5</Size>\
             <ETag>\"x\"</ETag></Contents><Contents><Key>a/2</Key><Size>7</Size></Contents>\
             <CommonPrefixes><Prefix>a/b/</Prefix></CommonPrefixes>\
             <NextContinuationToken>a/2</NextContinuationToken></ListBucketResult>",
        )
        .unwrap();
        assert_eq!(p.objects.len(), 2);
        assert_eq!(p.objects[1], Listed { key: "a/2".into(), size: 7, etag: None });
        assert_eq!((p.prefixes, p.next.as_deref()), (vec!["a/b/".to_string()], Some("a/2")));
        let last = page("<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>").unwrap();
        assert_eq!(last, Page::default());
        assert!(page("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>").is_err());
        assert!(page("<ListBucketResult><Contents><Key>k</Key></Contents></ListBucketResult>").is_err());
    }

    #[test]
    fn ceilings_on_nodes_keys_and_texts() {
        let many = "<Contents><Key>k</Key><Size>1</Size></Contents>".repeat(limits::ARCHIVE_LIST_KEYS_MAX + 1);
        let err = page(&format!("<ListBucketResult>{many}</ListBucketResult>")).unwrap_err();
        assert!(err.0.contains("keys"), "{err}");
        let flood = "<a/>".repeat(limits::ARCHIVE_XML_NODES_MAX as usize);
        assert!(page(&format!("<ListBucketResult>{flood}</ListBucketResult>")).unwrap_err().0.contains("not XML"));
        let fewer = "<Contents><Key>k</Key><Size>1</Size></Contents>".repeat(limits::ARCHIVE_LIST_KEYS_MAX);
        assert_eq!(page(&format!("<ListBucketResult>{fewer}</ListBucketResult>")).unwrap().objects.len(), 1_000);
        let long = "k".repeat(limits::ARCHIVE_KEY_MAX_BYTES + 1);
        let err =
            page(&format!("<ListBucketResult><Contents><Key>{long}</Key><Size>1</Size></Contents></ListBucketResult>"));
        assert!(err.unwrap_err().0.contains("Key over"));
        let dtd = "<!DOCTYPE x [<!ENTITY a \"b\">]><Error><Code>&a;</Code></Error>";
        assert_eq!(error(dtd), None);
    }
}
