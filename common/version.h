#ifndef KVCPT_VERSION_H
#define KVCPT_VERSION_H
#define KVCPT_VERSION "0.1.0"
#endif
