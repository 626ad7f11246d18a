//! Shell lines of the docs' code blocks as words: enough of the shell's syntax to find a command's arguments
//! (quotes, escapes, `$(…)`, operators that end a command, redirections, comments).

/// A shell word or an operator that ends a command (`|`, `&&`, `;`, …).
#[derive(Debug, PartialEq)]
pub enum Shell {
    Word(String),
    End,
}

/// Split a shell line into words (quotes, escapes and `$(…)` kept in their word), operators and redirections
/// (dropped with their target), stopping at a `#` comment.
pub fn shell_words(line: &str) -> Vec<Shell> {
    let (mut out, mut word, mut in_word) = (Vec::new(), String::new(), false);
    let (mut skip_next, mut chars) = (false, line.chars().peekable());
    fn finish(word: &mut String, in_word: &mut bool, skip: &mut bool, out: &mut Vec<Shell>) {
        if *in_word && !std::mem::take(skip) {
            out.push(Shell::Word(std::mem::take(word)));
        }
        word.clear();
        *in_word = false;
    }
    while let Some(c) = chars.next() {
        match c {
            '#' if !in_word => break,
            c if c.is_whitespace() => finish(&mut word, &mut in_word, &mut skip_next, &mut out),
            '\'' | '"' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == c {
                        break;
                    }
                    word.push(q);
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            '$' if chars.peek() == Some(&'(') => {
                in_word = true;
                word.push(c);
                substitution(&mut chars, &mut word);
            }
            '>' | '<' => {
                // `2>&1`, `> file`: the fd number, the operator and its target are not arguments.
                if word.chars().all(|d| d.is_ascii_digit()) {
                    word.clear();
                    in_word = false;
                }
                finish(&mut word, &mut in_word, &mut skip_next, &mut out);
                while chars.next_if(|&n| n == '>' || n == '&').is_some() {}
                skip_next = true;
            }
            '|' | ';' | '&' => {
                finish(&mut word, &mut in_word, &mut skip_next, &mut out);
                out.push(Shell::End);
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    finish(&mut word, &mut in_word, &mut skip_next, &mut out);
    out
}

/// `NAME=value`, a shell variable assignment before a command.
pub fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Copy a `$(…)` command substitution, from its `(` to the matching `)`, into `word`.
fn substitution(chars: &mut impl Iterator<Item = char>, word: &mut String) {
    let mut depth = 0;
    for q in chars {
        word.push(q);
        depth += (q == '(') as i32 - (q == ')') as i32;
        if depth == 0 {
            break;
        }
    }
}
