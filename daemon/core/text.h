/*
 * text: string helpers shared by the daemon's layers. Pure functions, no
 * I/O.
 */
#ifndef DETD_TEXT_H
#define DETD_TEXT_H

/*
 * A heap copy of s, "" when s is NULL (a row's optional string becomes a
 * message's empty one). The caller free()s it; NULL only when out of
 * memory.
 */
char *text_dup(const char *s);

#endif /* DETD_TEXT_H */
