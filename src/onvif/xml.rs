//! Reading ONVIF's XML: elements found by namespace and local name (each device picks its
//! own prefixes), a ceiling on nodes, no DTD, text bounded.

use roxmltree::{Document, Node, ParsingOptions};

use crate::limits;

pub const SOAP12: &str = "http://www.w3.org/2003/05/soap-envelope";
pub const SOAP11: &str = "http://schemas.xmlsoap.org/soap/envelope/";
pub const WSA: &str = "http://schemas.xmlsoap.org/ws/2004/08/addressing";
pub const WSD: &str = "http://schemas.xmlsoap.org/ws/2005/04/discovery";
pub const DN: &str = "http://www.onvif.org/ver10/network/wsdl";
pub const TDS: &str = "http://www.onvif.org/ver10/device/wsdl";
pub const TRT: &str = "http://www.onvif.org/ver10/media/wsdl";
pub const TT: &str = "http://www.onvif.org/ver10/schema";

/// Characters of one text value kept (a URI, a model name).
const TEXT_MAX_CHARS: usize = 1024;

/// Parses `text` with [`limits::ONVIF_XML_NODES_MAX`] nodes at most and no DTD.
pub fn parse(text: &str) -> Result<Document<'_>, String> {
    let options =
        ParsingOptions { allow_dtd: false, nodes_limit: limits::ONVIF_XML_NODES_MAX, ..ParsingOptions::default() };
    Document::parse_with_options(text, options).map_err(|e| format!("not XML: {e}"))
}

/// Whether `n` is the element `{ns}local`.
pub fn is(n: Node, ns: &str, local: &str) -> bool {
    n.is_element() && n.tag_name().name() == local && n.tag_name().namespace() == Some(ns)
}

/// The first child element `{ns}local` of `n`.
pub fn child<'a, 'i>(n: Node<'a, 'i>, ns: &str, local: &str) -> Option<Node<'a, 'i>> {
    n.children().find(|c| is(*c, ns, local))
}

/// The first element `{ns}local` under `n` at any depth.
pub fn find<'a, 'i>(n: Node<'a, 'i>, ns: &str, local: &str) -> Option<Node<'a, 'i>> {
    n.descendants().find(|c| is(*c, ns, local))
}

/// The trimmed text of `n`, at most [`TEXT_MAX_CHARS`] characters.
pub fn text(n: Node) -> String {
    n.text().unwrap_or("").trim().chars().take(TEXT_MAX_CHARS).collect()
}

/// The text of the child path `path` (each step `{ns}local`) under `n`, if there.
pub fn text_at(n: Node, path: &[(&str, &str)]) -> Option<String> {
    let mut at = n;
    for (ns, local) in path {
        at = child(at, ns, local)?;
    }
    Some(text(at))
}

/// The body of a SOAP 1.2 (or 1.1) envelope.
pub fn body<'a, 'i>(doc: &'a Document<'i>) -> Result<Node<'a, 'i>, String> {
    let root = doc.root_element();
    let ns = [SOAP12, SOAP11].into_iter().find(|ns| is(root, ns, "Envelope")).ok_or("not a SOAP envelope")?;
    child(root, ns, "Body").ok_or_else(|| "a SOAP envelope without a body".into())
}

/// A SOAP fault in `body`: its codes' local names (code, then subcodes) and its reason.
pub fn fault(body: Node) -> Option<(Vec<String>, String)> {
    let f = [SOAP12, SOAP11].into_iter().find_map(|ns| child(body, ns, "Fault"))?;
    let local = |q: String| q.rsplit(':').next().unwrap_or("").to_string();
    let mut codes = Vec::new();
    // SOAP 1.2: Code/Value, Code/Subcode/Value, … ; SOAP 1.1: faultcode.
    let mut code = child(f, SOAP12, "Code");
    while let Some(c) = code {
        if let Some(v) = child(c, SOAP12, "Value") {
            codes.push(local(text(v)));
        }
        if codes.len() >= 4 {
            break;
        }
        code = child(c, SOAP12, "Subcode");
    }
    if let Some(c) = f.children().find(|c| c.is_element() && c.tag_name().name() == "faultcode") {
        codes.push(local(text(c)));
    }
    let reason = child(f, SOAP12, "Reason")
        .and_then(|r| child(r, SOAP12, "Text"))
        .or_else(|| f.children().find(|c| c.is_element() && c.tag_name().name() == "faultstring"))
        .map(text)
        .unwrap_or_default();
    Some((codes, reason))
}

/// `s` with XML's five special characters escaped, for text and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_are_found_by_namespace_not_prefix() {
        let text = r#"<e:Envelope xmlns:e="http://www.w3.org/2003/05/soap-envelope" xmlns:x="http://www.onvif.org/ver10/schema">
            <e:Body><x:Uri> rtsp://a/b </x:Uri><Uri xmlns="urn:other">no</Uri></e:Body></e:Envelope>"#;
        let doc = parse(text).unwrap();
        let body = body(&doc).unwrap();
        assert_eq!(text_at(body, &[(TT, "Uri")]).as_deref(), Some("rtsp://a/b"));
        assert!(find(body, TRT, "Uri").is_none());
    }

    #[test]
    fn a_document_past_the_node_ceiling_is_refused() {
        let many = "<a/>".repeat(limits::ONVIF_XML_NODES_MAX as usize);
        let text = format!("<r>{many}</r>");
        assert!(parse(&text).unwrap_err().contains("nodes"), "{:?}", parse(&text).err());
        let fewer = "<a/>".repeat(limits::ONVIF_XML_NODES_MAX as usize - 10);
        assert!(parse(&format!("<r>{fewer}</r>")).is_ok());
    }

    #[test]
    fn a_dtd_is_refused() {
        let text = r#"<!DOCTYPE r [<!ENTITY a "aaaaaaaaaa">]><r>&a;&a;</r>"#;
        assert!(parse(text).is_err());
    }

    #[test]
    fn faults_name_their_codes() {
        let text = r#"<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope" xmlns:ter="http://www.onvif.org/ver10/error"><s:Body><s:Fault>
            <s:Code><s:Value>s:Sender</s:Value><s:Subcode><s:Value>ter:NotAuthorized</s:Value></s:Subcode></s:Code>
            <s:Reason><s:Text xml:lang="en">Sender not Authorized</s:Text></s:Reason></s:Fault></s:Body></s:Envelope>"#;
        let doc = parse(text).unwrap();
        let (codes, reason) = fault(body(&doc).unwrap()).unwrap();
        assert_eq!(codes, ["Sender", "NotAuthorized"]);
        assert_eq!(reason, "Sender not Authorized");
        assert_eq!(escape(r#"<a b="c">&'"#), "&lt;a b=&quot;c&quot;&gt;&amp;&apos;");
    }
}
