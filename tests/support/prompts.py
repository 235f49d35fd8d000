"""Runs a command in a pseudo-terminal and answers its permission prompts, as a user at a terminal
would (tests/distribution/permissions.test.ts drives Deno's prompts through it).

Usage: prompts.py ANSWERS COMMAND [ARG...]
ANSWERS holds one letter per prompt ("y", "n" or "A"), given in turn each time the output shows
one more "Allow?" than was answered; a prompt beyond them is answered "n". Prints everything the
command wrote to the terminal, then "prompts: N" and "exit: CODE". The command is killed after 90 s.
"""

import os
import pty
import select
import signal
import sys
import time


def main() -> int:
    answers, command = sys.argv[1], sys.argv[2:]
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp(command[0], command)
    transcript = b""
    answered = 0
    answer = "n"
    sent_at = 0.0
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        # Deno discards what was typed before it reads an answer, so one sent too early is lost:
        # until Deno says it granted or denied, the answer is sent again.
        settled = transcript.count(b"Granted ") + transcript.count(b"Denied ")
        if settled < answered and time.monotonic() - sent_at > 2:
            os.write(fd, answer.encode() + b"\r")
            sent_at = time.monotonic()
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the command ended and closed the terminal
            break
        if not chunk:
            break
        transcript += chunk
        while transcript.count(b"Allow?") > answered:
            answer = answers[answered] if answered < len(answers) else "n"
            answered += 1
            time.sleep(0.3)
            os.write(fd, answer.encode() + b"\r")
            sent_at = time.monotonic()
    else:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    sys.stdout.write(transcript.decode(errors="replace").replace("\r\n", "\n"))
    print(f"\nprompts: {answered}")
    print(f"exit: {os.waitstatus_to_exitcode(status)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
