//! What an OpenID provider sends reaches `oidc::token` as whatever bytes it holds: its
//! discovery document, its key set, its token endpoint's answer and the id token in it. Each
//! must be read or refused with an error, never panic; an id token is only accepted when it
//! verifies against the keys given.
//!
//! Input: a byte that picks what the rest is (a discovery document, a key set, a token
//! answer, an id token checked against a fixed key set, or a key set and a token separated by
//! a NUL).

#![no_main]

use keeppeek::oidc::token::{self, Discovery, Expect, Keys};
use libfuzzer_sys::fuzz_target;

/// A provider's published key (EC P-256), so that a token may reach the signature check.
const JWKS: &[u8] = br#"{"keys":[{"kty":"EC","crv":"P-256","kid":"k1","use":"sig","alg":"ES256",
"x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
{"kty":"RSA","kid":"r1","n":"sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw","e":"AQAB"}]}"#;
const ISSUER: &str = "https://id.home.example";

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    match pick % 5 {
        0 => {
            if let Ok(d) = Discovery::parse(rest, ISSUER) {
                assert_eq!(d.issuer, ISSUER);
                for u in [&d.authorization_endpoint, &d.token_endpoint, &d.jwks_uri] {
                    assert_eq!(u.scheme(), "https");
                }
            }
        }
        1 => {
            if let Ok(k) = Keys::parse(rest) {
                assert!(k.len() <= keeppeek::limits::OIDC_JWKS_KEYS_MAX);
            }
        }
        2 => {
            let _ = token::id_token_of(rest);
        }
        3 => {
            let keys = Keys::parse(JWKS).expect("the fixed key set");
            let Ok(t) = std::str::from_utf8(rest) else { return };
            let expect = Expect { issuer: ISSUER, client_id: "keeppeek", nonce: "n", role_claim: "groups" };
            // No input can sign for these keys: nothing verifies.
            assert!(token::verify(t, &keys, &expect).is_err());
        }
        _ => {
            let (set, t) = match rest.iter().position(|&b| b == 0) {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => return,
            };
            let (Ok(keys), Ok(t)) = (Keys::parse(set), std::str::from_utf8(t)) else { return };
            let expect = Expect { issuer: ISSUER, client_id: "keeppeek", nonce: "n", role_claim: "groups" };
            if let Ok(id) = token::verify(t, &keys, &expect) {
                assert!(id.role_values.len() <= keeppeek::limits::OIDC_CLAIM_VALUES_MAX);
            }
        }
    }
});
