#ifndef KVCPT_INPUT_LIST_H
#define KVCPT_INPUT_LIST_H
/* Expands --input arguments: a file is taken as is (it must be a supported
 * kind and readable); a directory contributes every supported file below it,
 * in sorted path order, so the same tree always gives the same order. */
typedef struct {
    char **paths;
    int count;
    struct {
        unsigned long long dev, ino;
    } skip[4]; /* directories never walked */
    int n_skip;
} InputList;

/* Directories met inside an input directory that are passed over (the
 * output and build directories of prepare, which would otherwise read its
 * own manifest and shards back); compared by device and inode, so another
 * spelling or a link to them is passed over too. A missing one is ignored. */
void input_list_skip(InputList *l, const char *dir);
void input_list_add(InputList *l, const char *path);
void input_list_free(InputList *l);

#endif
