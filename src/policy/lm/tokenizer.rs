//! The default tokenizer: word level, built locally from every word the observation
//! encoders can write (the words every family's text shares, each shipped family's own
//! words, [`crate::envs::family::Family::words`], and the action words, team and role
//! names, talk vocabularies and family words of the scenes it is built with), saved as a
//! Hugging Face `tokenizer.json`. Text is split on whitespace, then numbers into single
//! digits. Any Hugging Face `tokenizer.json` loads too.

use std::collections::{BTreeSet, HashMap};
use tokenizers::Tokenizer;
use tokenizers::models::wordlevel::WordLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::whitespace::WhitespaceSplit;

use crate::envs::family;
use crate::scene::{Scene, Thing};

/// Padding (id 0), unknown word (id 1), end of text (id 2).
pub const SPECIAL: [&str; 3] = ["<pad>", "<unk>", "<eos>"];

/// The vocabulary of the default tokenizer for `scenes`: special tokens, then every word in
/// sorted order.
pub fn default_vocabulary(scenes: &[Scene]) -> Vec<String> {
    let mut words: BTreeSet<String> = crate::observe::text::WORDS
        .split_whitespace()
        .map(String::from)
        .collect();
    for f in family::shipped() {
        words.extend(f.words(None));
    }
    for s in scenes {
        words.extend(crate::envs::action_names(s));
        words.extend(s.team_names().iter().map(|n| n.to_string()));
        words.extend(s.roles.iter().cloned());
        words.extend(family::of(s).vocabulary(s).unwrap_or_default());
        words.extend(family::of(s).words(Some(s)));
    }
    // Names with spaces would never come out of the whitespace split.
    words.retain(|w| !w.chars().any(char::is_whitespace) && !SPECIAL.contains(&w.as_str()));
    SPECIAL.iter().map(|s| s.to_string()).chain(words).collect()
}

/// A word-level tokenizer over `vocabulary` (ids in order), splitting on whitespace and
/// numbers into digits.
pub fn build_tokenizer(vocabulary: &[String]) -> Result<Tokenizer, String> {
    let vocab: HashMap<String, u32> = vocabulary
        .iter()
        .enumerate()
        .map(|(i, w)| (w.clone(), i as u32))
        .collect();
    let model = WordLevel::builder()
        .vocab(vocab.into_iter().collect())
        .unk_token(SPECIAL[1].to_string())
        .build()
        .map_err(|e| e.to_string())?;
    let mut tok = Tokenizer::new(model);
    tok.with_pre_tokenizer(Some(Sequence::new(vec![
        WhitespaceSplit.into(),
        Digits::new(true).into(),
    ])));
    Ok(tok)
}

/// Refuses a tokenizer that cannot be used safely: two tokens with one id (the model could
/// not tell them apart), or a word-level or word-piece model whose unknown token is not in
/// its vocabulary (any word it lacks would fail to encode mid-run; a byte-level BPE, which
/// can spell any text, needs none).
pub fn check_tokenizer(tok: &Tokenizer) -> Result<(), String> {
    use tokenizers::ModelWrapper;
    let vocab = tok.get_vocab(true);
    let mut by_id: Vec<(u32, &String)> = vocab.iter().map(|(w, &i)| (i, w)).collect();
    by_id.sort();
    if let Some(pair) = by_id.windows(2).find(|p| p[0].0 == p[1].0) {
        return Err(format!(
            "tokens {:?} and {:?} share the id {}; expected one id per token",
            pair[0].1, pair[1].1, pair[0].0
        ));
    }
    let unk = match tok.get_model() {
        ModelWrapper::WordLevel(m) => Some(m.unk_token.clone()),
        ModelWrapper::WordPiece(m) => Some(m.unk_token.clone()),
        ModelWrapper::BPE(m) => {
            let byte_level = m.byte_fallback
                || tok.get_pre_tokenizer().is_some_and(|p| {
                    serde_json::to_string(p).is_ok_and(|j| j.contains("ByteLevel"))
                });
            (!byte_level).then(|| m.unk_token.clone().unwrap_or_default())
        }
        ModelWrapper::Unigram(_) => None,
    };
    if let Some(unk) = unk
        && !vocab.contains_key(&unk)
    {
        return Err(format!(
            "its unknown token {unk:?} is not in its vocabulary, so a word it lacks could not \
             be encoded; expected an unknown token (such as \"<unk>\") with an id"
        ));
    }
    Ok(())
}

/// The scene's own words (team names, roles, key names, the maze's vocabulary) that `tok`
/// reads only as its unknown token, each once, with what they are.
pub fn unknown_scene_words(tok: &Tokenizer, scene: &Scene) -> Vec<(String, &'static str)> {
    let unk = tok.token_to_id(SPECIAL[1]);
    let mut words: Vec<(String, &'static str)> = Vec::new();
    words.extend(
        scene
            .team_names()
            .iter()
            .map(|n| (n.to_string(), "team name")),
    );
    words.extend(scene.roles.iter().map(|r| (r.clone(), "role")));
    let said = family::of(scene).vocabulary(scene).unwrap_or_default();
    words.extend(said.into_iter().map(|w| (w, "word")));
    for t in &scene.cells {
        if let Thing::Key(n) | Thing::LockedDoor(n) = t {
            words.push((n.clone(), "key name"));
        }
    }
    let mut seen = BTreeSet::new();
    words
        .into_iter()
        .filter(|(w, _)| seen.insert(w.clone()))
        .filter(|(w, _)| {
            encode(tok, w).is_ok_and(|ids| ids.is_empty() || unk.is_some_and(|u| ids.contains(&u)))
        })
        .collect()
}

/// Says once per process and word, on standard error, that `tok` (at `path`) reads a word
/// of the scene as its unknown token.
pub fn warn_unknown_scene_words(tok: &Tokenizer, scene: &Scene, path: &std::path::Path) {
    static SAID: std::sync::Mutex<BTreeSet<String>> = std::sync::Mutex::new(BTreeSet::new());
    for (w, what) in unknown_scene_words(tok, scene) {
        let fresh = SAID
            .lock()
            .map(|mut s| s.insert(format!("{}\0{w}", path.display())))
            .unwrap_or(true);
        if fresh {
            eprintln!(
                "warning: {}: the scene's {what} {w:?} is not in this tokenizer: the model reads \
                 it as an unknown token, not as a word",
                path.display()
            );
        }
    }
}

/// Token ids of `text` (no special tokens added).
pub fn encode(tok: &Tokenizer, text: &str) -> Result<Vec<u32>, String> {
    tok.encode(text, false)
        .map(|e| e.get_ids().to_vec())
        .map_err(|e| e.to_string())
}
