"""The IMAP front (issue 50, docs/concepts/imap.md): a stateless process that lets a mail
client (Thunderbird, mutt, `mbsync`) open its user's mailbox.  It authenticates the user
(`users`), finds the mailbox's database in the directory and its active copy through the
one node client, and answers IMAP with pymap's protocol (`protocol`: our limits and
refusals as subclasses) over a backend of our own (`backend`, `folders`) that keeps nothing
a restart loses: folders, flags, UIDs and messages are the database's.

Like `transport`, it imports only the ground floor (`dag_common`) and itself."""
