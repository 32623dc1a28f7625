//! `vramscope live [TARGET] [--token T] [--json] [--once] [--interval SECS]`:
//! the memory of a running process, as its recording publishes it
//! (docs/live-protocol.md). All reading and drawing is in
//! `vramscope-live`; this module picks the output mode and runs the
//! terminal.
//!
//! Modes: `--json` prints each state as one JSON line and never touches the
//! terminal; stdout not a terminal prints plain frames; otherwise a full
//! screen (alternate screen, raw mode, restored on exit and on panic).

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use crossterm::style::{Attribute, Color, Print, SetAttribute, SetForegroundColor};
use crossterm::{cursor, execute, queue, terminal};
use vramscope_live::view::{render, Frame, Style};
use vramscope_live::{
    registry_dir, resolve, History, LiveError, Reader, ReaderOptions, Sample, State, UiState,
};

use crate::{output, CliError};

/// Columns and rows of a plain frame (no terminal to ask).
const PLAIN_SIZE: (usize, usize) = (100, 50);

#[derive(clap::Args)]
#[command(
    after_help = "TARGET: a PID (its registry entry), HOST:PORT (its token from --token or the registry), \
or a state file written with record(live=\"file:PATH\"); none: the only live process.\n\
Keys: q/Esc quit, ↑/↓ or j/k select a holder, Enter/→ show its stack, ← hide it, p pause.\n\
Exit codes: 0 success (also when the process ends after states were shown), 1 no live process, \
or it could not be reached or read, or refused the token, 2 usage: TARGET not understood, \
several processes to choose from, or what came back is not a state"
)]
pub struct Args {
    /// A PID, HOST:PORT, or a state file (default: the only live process
    /// in the registry directory, $VRAMSCOPE_LIVE_DIR or its default).
    pub target: Option<String>,
    /// The token of a HOST:PORT not in the registry.
    #[arg(long)]
    pub token: Option<String>,
    /// Print each state received as one JSON line (as sent: every key).
    #[arg(long)]
    pub json: bool,
    /// Exit after the first state (with --json: print it; else print one
    /// plain frame).
    #[arg(long)]
    pub once: bool,
    /// Seconds between checks of a state file and between plain frames.
    #[arg(long, default_value_t = 0.5, value_parser = parse_interval, value_name = "SECS")]
    pub interval: f64,
}

fn parse_interval(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 3600.0 => Ok(v),
        _ => Err(format!(
            "expected seconds between 0 and 3600, e.g. 0.5, found {s:?}"
        )),
    }
}

fn cli_error(e: LiveError) -> CliError {
    if e.is_invalid_input() {
        CliError::Invalid(e.into())
    } else {
        CliError::Io(e.into())
    }
}

pub fn run(a: Args) -> Result<(), CliError> {
    let source =
        resolve(a.target.as_deref(), a.token.as_deref(), &registry_dir()).map_err(cli_error)?;
    let interval = Duration::from_secs_f64(a.interval);
    let opts = ReaderOptions {
        poll: interval,
        ..ReaderOptions::default()
    };
    let mut reader = Reader::open(&source, &opts).map_err(cli_error)?;
    let first = reader.next_state().map_err(cli_error)?;
    if a.json {
        json_lines(reader, first, a.once)
    } else if a.once {
        output::print(&render_plain(&first.state, &History::default()))
    } else if !std::io::stdout().is_terminal() {
        plain_frames(reader, first, interval)
    } else {
        interactive(reader, first)
    }
}

/// The end of the stream once states were shown: the process finished or
/// stopped its recording, which is how a watched run normally ends.
fn finish(e: LiveError) -> Result<(), CliError> {
    if e.is_end() {
        eprintln!("vramscope: {e}");
        Ok(())
    } else {
        Err(cli_error(e))
    }
}

fn json_lines(mut reader: Reader, first: Sample, once: bool) -> Result<(), CliError> {
    output::print(&format!("{}\n", first.raw))?;
    if once {
        return Ok(());
    }
    loop {
        match reader.next_state() {
            Ok(s) => output::print(&format!("{}\n", s.raw))?,
            Err(e) => return finish(e),
        }
    }
}

fn render_plain(state: &State, history: &History) -> String {
    let mut h = history.clone();
    if h.is_empty() {
        h.push(state);
    }
    render(state, &h, PLAIN_SIZE, &UiState::default()).to_plain()
}

/// Not a terminal: a plain frame per state, at most one per interval.
fn plain_frames(mut reader: Reader, first: Sample, interval: Duration) -> Result<(), CliError> {
    let mut history = History::default();
    history.push(&first.state);
    output::print(&render_plain(&first.state, &history))?;
    let mut printed = Instant::now();
    loop {
        let s = match reader.next_state() {
            Ok(s) => s,
            Err(e) => return finish(e),
        };
        history.push(&s.state);
        if printed.elapsed() >= interval {
            output::print(&format!("\n{}", render_plain(&s.state, &history)))?;
            printed = Instant::now();
        }
    }
}

/// Whether the screen is taken over, for the panic hook.
static SCREEN_ACTIVE: AtomicBool = AtomicBool::new(false);
static HOOK: std::sync::Once = std::sync::Once::new();

/// Raw mode and the alternate screen for as long as it lives; a panic
/// restores the terminal before its message is printed, or the message
/// would be lost with the alternate screen and the shell left in raw mode.
struct Screen;

impl Screen {
    fn enter() -> std::io::Result<Screen> {
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                if SCREEN_ACTIVE.swap(false, Ordering::SeqCst) {
                    restore();
                }
                previous(info);
            }));
        });
        terminal::enable_raw_mode()?;
        SCREEN_ACTIVE.store(true, Ordering::SeqCst);
        execute!(
            std::io::stdout(),
            terminal::EnterAlternateScreen,
            cursor::Hide
        )?;
        Ok(Screen)
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        if SCREEN_ACTIVE.swap(false, Ordering::SeqCst) {
            restore();
        }
    }
}

fn restore() {
    let _ = execute!(
        std::io::stdout(),
        cursor::Show,
        terminal::LeaveAlternateScreen
    );
    let _ = terminal::disable_raw_mode();
}

fn term_io(e: std::io::Error) -> CliError {
    CliError::Io(anyhow::Error::new(e).context("drawing on the terminal"))
}

fn interactive(mut reader: Reader, first: Sample) -> Result<(), CliError> {
    // The reader blocks; it runs beside the screen and stops at its first
    // error, or when the screen is gone (the send fails).
    let (tx, rx) = mpsc::channel::<Result<Sample, LiveError>>();
    std::thread::spawn(move || loop {
        let r = reader.next_state();
        let stop = r.is_err();
        if tx.send(r).is_err() || stop {
            break;
        }
    });

    let _screen = Screen::enter().map_err(term_io)?;
    let mut history = History::default();
    history.push(&first.state);
    let mut latest = first.state;
    let mut frozen: Option<(State, History)> = None;
    let mut ui = UiState {
        keys: true,
        ..UiState::default()
    };
    let mut dirty = true;
    loop {
        loop {
            match rx.try_recv() {
                Ok(Ok(s)) => {
                    if frozen.is_none() {
                        ui.follow(Some(&latest), &s.state);
                    }
                    history.push(&s.state);
                    latest = s.state;
                    dirty = true;
                }
                Ok(Err(e)) => {
                    ui.status = Some(format!("{e} · q to quit"));
                    dirty = true;
                }
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    if ui.status.is_none() {
                        ui.status = Some("no more states · q to quit".into());
                        dirty = true;
                    }
                    break;
                }
            }
        }
        if dirty {
            let (w, h) = terminal::size().map_err(term_io)?;
            let (state, hist) = frozen.as_ref().map_or((&latest, &history), |(s, h)| (s, h));
            let frame = render(state, hist, (w as usize, h as usize), &ui);
            ui.scroll = frame.scroll;
            draw(&frame, w as usize, h as usize).map_err(term_io)?;
            dirty = false;
        }
        if !event::poll(Duration::from_millis(100)).map_err(term_io)? {
            continue;
        }
        match event::read().map_err(term_io)? {
            Event::Key(k) if k.kind != KeyEventKind::Release => {
                let shown = frozen.as_ref().map_or(&latest, |(s, _)| s);
                match k.code {
                    KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                    KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => {
                        return Ok(())
                    }
                    KeyCode::Up | KeyCode::Char('k') => ui.up(),
                    KeyCode::Down | KeyCode::Char('j') => ui.down(shown.top.len()),
                    KeyCode::Enter => ui.expanded = !ui.expanded,
                    KeyCode::Right => ui.expanded = true,
                    KeyCode::Left => ui.expanded = false,
                    KeyCode::Char('p') => {
                        if let Some((old, _)) = frozen.take() {
                            ui.follow(Some(&old), &latest);
                        } else {
                            frozen = Some((latest.clone(), history.clone()));
                        }
                        ui.paused = frozen.is_some();
                    }
                    _ => continue,
                }
                dirty = true;
            }
            Event::Resize(..) => dirty = true,
            _ => {}
        }
    }
}

/// Draw a frame over the previous one, line by line (no full clear, which
/// flickers).
fn draw(frame: &Frame, w: usize, h: usize) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    queue!(out, terminal::BeginSynchronizedUpdate)?;
    for y in 0..h {
        queue!(out, cursor::MoveTo(0, y as u16))?;
        let Some(line) = frame.lines.get(y) else {
            queue!(out, terminal::Clear(terminal::ClearType::UntilNewLine))?;
            continue;
        };
        // The last cell of the last row would scroll some terminals.
        let room = if y + 1 == h { w.saturating_sub(1) } else { w };
        let mut text: String = line.text.chars().take(room).collect();
        let len = text.chars().count();
        match line.style {
            Style::Normal => {}
            Style::Title => queue!(out, SetAttribute(Attribute::Bold))?,
            Style::Dim => queue!(out, SetAttribute(Attribute::Dim))?,
            Style::Alert => queue!(out, SetForegroundColor(Color::Red))?,
            Style::Selected => {
                // The highlight spans the row, not just its text.
                text.extend(std::iter::repeat_n(' ', room - len));
                queue!(out, SetAttribute(Attribute::Reverse))?;
            }
        }
        queue!(out, Print(text), SetAttribute(Attribute::Reset))?;
        if len < room {
            queue!(out, terminal::Clear(terminal::ClearType::UntilNewLine))?;
        }
    }
    queue!(out, terminal::EndSynchronizedUpdate)?;
    out.flush()
}
