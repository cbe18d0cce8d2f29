fn _y(){}
